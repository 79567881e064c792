//! The static files written beside nginx.conf as they are (the proxy includes).

/// Static files written as they are, next to nginx.conf.
pub const STATIC_FILES: &[(&str, &str)] = &[
    (
        "conf/proxy-http.conf",
        include_str!("../../../../rootfs/etc/nginx/proxy-http.conf"),
    ),
    (
        "conf/proxy-https.conf",
        include_str!("../../../../rootfs/etc/nginx/proxy-https.conf"),
    ),
    (
        "conf/proxy-https-unshared.conf",
        include_str!("../../../../rootfs/etc/nginx/proxy-https-unshared.conf"),
    ),
    (
        "conf/proxy-auto-http.conf",
        include_str!("../../../../rootfs/etc/nginx/proxy-auto-http.conf"),
    ),
    (
        "conf/njs-proxy-auto-http.conf",
        include_str!("../../../../rootfs/etc/nginx/njs-proxy-auto-http.conf"),
    ),
    (
        "conf/grpcs-unshared.conf",
        include_str!("../../../../rootfs/etc/nginx/grpcs-unshared.conf"),
    ),
    (
        "conf/njs-proxy-https-unshared.conf",
        include_str!("../../../../rootfs/etc/nginx/njs-proxy-https-unshared.conf"),
    ),
    (
        "conf/njs-grpcs-unshared.conf",
        include_str!("../../../../rootfs/etc/nginx/njs-grpcs-unshared.conf"),
    ),
    (
        "conf/grpc.conf",
        include_str!("../../../../rootfs/etc/nginx/grpc.conf"),
    ),
    (
        "conf/grpcs.conf",
        include_str!("../../../../rootfs/etc/nginx/grpcs.conf"),
    ),
    (
        "conf/proxy-headers.conf",
        include_str!("../../../../rootfs/etc/nginx/proxy-headers.conf"),
    ),
    (
        "conf/cors-headers.conf",
        include_str!("../../../../rootfs/etc/nginx/cors-headers.conf"),
    ),
    (
        "conf/grpc-headers.conf",
        include_str!("../../../../rootfs/etc/nginx/grpc-headers.conf"),
    ),
    (
        "conf/njs-proxy-http.conf",
        include_str!("../../../../rootfs/etc/nginx/njs-proxy-http.conf"),
    ),
    (
        "conf/njs-proxy-https.conf",
        include_str!("../../../../rootfs/etc/nginx/njs-proxy-https.conf"),
    ),
    (
        "conf/njs-grpc.conf",
        include_str!("../../../../rootfs/etc/nginx/njs-grpc.conf"),
    ),
    (
        "conf/njs-grpcs.conf",
        include_str!("../../../../rootfs/etc/nginx/njs-grpcs.conf"),
    ),
];

/// `conf/proxy-headers.conf` where Ferrule's module has `ferrule_header_lines`: one
/// header line carries the others.
const PROXY_HEADERS_MODULE: &str =
    include_str!("../../../../rootfs/etc/nginx/proxy-headers-module.conf");

/// The static files to write: [`STATIC_FILES`], with the module's
/// `conf/proxy-headers.conf` where it writes the headers' lines (`module_headers`:
/// [`super::RenderOptions::location_directive`]).
pub fn static_files(module_headers: bool) -> impl Iterator<Item = (&'static str, &'static str)> {
    STATIC_FILES.iter().map(move |&(path, text)| match path {
        "conf/proxy-headers.conf" if module_headers => (path, PROXY_HEADERS_MODULE),
        _ => (path, text),
    })
}
