//! The directives a tenant's snippet may hold, per kind of block, and the checks on
//! their arguments. Anything not listed is refused: a new NGINX module, or a
//! directive nobody thought of, cannot become a way in.
//!
//! Left out on purpose, whatever the kind: everything that runs code (`*_by_lua*`,
//! `lua_*`, `js_*`, `perl*`), reads or writes a file (`include`, `load_module`,
//! `root`, `alias`, `try_files`, `*_certificate*`, `*_trusted_certificate`, `*_crl`,
//! `*_password_file`, `*_conf_command`, `*_key_log`, `*_temp_path`, `*_store`,
//! `*_cache*`, `ssi`, `auth_basic_user_file`, `secure_link_secret`), listens in an
//! HTTP block (`listen`), changes which hosts a server answers (`server_name`), who
//! the client is (`set_real_ip_from`, `real_ip_header`), or where names resolve
//! (`resolver`), and `stub_status` (every tenant's connection counts). Arguments of
//! the directives listed are checked where they name a place: a proxied address
//! ([`super::targets`]), a log's file, a `listen` port, a variable Ferrule owns.

use super::Context;
use super::targets;
use super::tokens::Statement;

/// Where a snippet is written, which decides what it may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A `location` block (`configuration-snippet`, `auth-snippet`).
    Location,
    /// A `server` block of the HTTP module (`server-snippet`).
    Server,
    /// The `http` block (NGINX Inc's `http-snippets`).
    Http,
    /// The `stream` block (`stream-snippet`).
    Stream,
}

impl Kind {
    /// The kind in words, for messages.
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Location => "location",
            Kind::Server => "server",
            Kind::Http => "http",
            Kind::Stream => "stream",
        }
    }

    fn block(self) -> Block {
        match self {
            Kind::Location => Block::Location,
            Kind::Server => Block::Server,
            Kind::Http => Block::Http,
            Kind::Stream => Block::Stream,
        }
    }
}

/// The blocks a snippet may be in or open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Location,
    Server,
    Http,
    HttpUpstream,
    Stream,
    StreamServer,
    StreamUpstream,
    /// `map` and `split_clients`: pairs, not directives.
    Pairs,
}

/// What is checked of a listed directive's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Args {
    /// Nothing that names a place: any argument.
    Any,
    /// `access_log`, `error_log`: off, standard streams or syslog only.
    Log,
    /// `proxy_pass` and the like: the address is not Ferrule's host's own.
    Target,
    /// An upstream's `server`: as `Target`.
    UpstreamServer,
    /// `set`, `auth_request_set`: not a variable of Ferrule's.
    Variable,
    /// `map`: its result is not a variable of Ferrule's.
    MapResult,
    /// `if`: no file tests.
    Condition,
    /// The stream `listen`: not a port of Ferrule's, not a unix socket.
    Listen,
}

/// One allowed directive: its name, what its arguments get checked for, the block
/// it opens (if it is one).
type Rule = (&'static str, Args, Option<Block>);

const fn any(name: &'static str) -> Rule {
    (name, Args::Any, None)
}

/// Headers, redirects and the rewrite module's plain directives.
const HEADERS_AND_REWRITES: &[Rule] = &[
    any("add_header"),
    any("add_trailer"),
    any("more_set_headers"),
    any("more_clear_headers"),
    any("more_set_input_headers"),
    any("more_clear_input_headers"),
    any("expires"),
    any("etag"),
    any("charset"),
    any("source_charset"),
    any("override_charset"),
    any("default_type"),
    any("if_modified_since"),
    any("rewrite"),
    any("return"),
    any("break"),
    any("rewrite_log"),
    any("uninitialized_variable_warn"),
    ("set", Args::Variable, None),
];

/// Proxying to an address, with its settings (none that read a file or cache).
const PROXYING: &[Rule] = &[
    ("proxy_pass", Args::Target, None),
    any("proxy_set_header"),
    any("proxy_hide_header"),
    any("proxy_pass_header"),
    any("proxy_ignore_headers"),
    any("proxy_http_version"),
    any("proxy_method"),
    any("proxy_set_body"),
    any("proxy_pass_request_body"),
    any("proxy_pass_request_headers"),
    any("proxy_connect_timeout"),
    any("proxy_read_timeout"),
    any("proxy_send_timeout"),
    any("proxy_buffering"),
    any("proxy_buffer_size"),
    any("proxy_buffers"),
    any("proxy_busy_buffers_size"),
    any("proxy_request_buffering"),
    any("proxy_max_temp_file_size"),
    any("proxy_redirect"),
    any("proxy_cookie_domain"),
    any("proxy_cookie_path"),
    any("proxy_cookie_flags"),
    any("proxy_intercept_errors"),
    any("proxy_next_upstream"),
    any("proxy_next_upstream_tries"),
    any("proxy_next_upstream_timeout"),
    any("proxy_force_ranges"),
    any("proxy_limit_rate"),
    any("proxy_ignore_client_abort"),
    any("proxy_socket_keepalive"),
    any("proxy_ssl_server_name"),
    any("proxy_ssl_name"),
    any("proxy_ssl_verify"),
    any("proxy_ssl_verify_depth"),
    any("proxy_ssl_protocols"),
    any("proxy_ssl_ciphers"),
    any("proxy_ssl_session_reuse"),
    ("grpc_pass", Args::Target, None),
    any("grpc_set_header"),
    any("grpc_hide_header"),
    any("grpc_pass_header"),
    any("grpc_ignore_headers"),
    any("grpc_connect_timeout"),
    any("grpc_read_timeout"),
    any("grpc_send_timeout"),
    any("grpc_buffer_size"),
    any("grpc_intercept_errors"),
    any("grpc_next_upstream"),
    any("grpc_next_upstream_tries"),
    any("grpc_next_upstream_timeout"),
    any("grpc_socket_keepalive"),
    any("grpc_ssl_server_name"),
    any("grpc_ssl_name"),
    any("grpc_ssl_verify"),
    any("grpc_ssl_verify_depth"),
    any("grpc_ssl_protocols"),
    any("grpc_ssl_ciphers"),
    any("grpc_ssl_session_reuse"),
    ("fastcgi_pass", Args::Target, None),
    any("fastcgi_param"),
    any("fastcgi_index"),
    any("fastcgi_split_path_info"),
    any("fastcgi_connect_timeout"),
    any("fastcgi_read_timeout"),
    any("fastcgi_send_timeout"),
    any("fastcgi_buffering"),
    any("fastcgi_buffer_size"),
    any("fastcgi_buffers"),
    any("fastcgi_intercept_errors"),
    any("fastcgi_hide_header"),
    any("fastcgi_pass_header"),
    any("fastcgi_ignore_headers"),
    any("fastcgi_keep_conn"),
    any("fastcgi_request_buffering"),
    any("fastcgi_next_upstream"),
    ("uwsgi_pass", Args::Target, None),
    any("uwsgi_param"),
    any("uwsgi_connect_timeout"),
    any("uwsgi_read_timeout"),
    any("uwsgi_send_timeout"),
    any("uwsgi_buffering"),
    any("uwsgi_intercept_errors"),
    any("uwsgi_hide_header"),
    any("uwsgi_pass_header"),
    any("uwsgi_modifier1"),
    any("uwsgi_modifier2"),
    ("scgi_pass", Args::Target, None),
    any("scgi_param"),
    any("scgi_connect_timeout"),
    any("scgi_read_timeout"),
    any("scgi_send_timeout"),
    any("scgi_buffering"),
    any("scgi_intercept_errors"),
    any("scgi_hide_header"),
    any("scgi_pass_header"),
];

/// Access (only ever narrowing it, or naming a location of the same server),
/// limits, compression, error pages, logs, timeouts.
const REQUEST_HANDLING: &[Rule] = &[
    any("allow"),
    any("deny"),
    any("satisfy"),
    any("auth_basic"),
    any("auth_request"),
    ("auth_request_set", Args::Variable, None),
    any("internal"),
    any("limit_req"),
    any("limit_req_status"),
    any("limit_req_log_level"),
    any("limit_req_dry_run"),
    any("limit_conn"),
    any("limit_conn_status"),
    any("limit_conn_log_level"),
    any("limit_conn_dry_run"),
    any("limit_rate"),
    any("limit_rate_after"),
    any("client_max_body_size"),
    any("client_body_buffer_size"),
    any("client_body_timeout"),
    any("client_body_in_single_buffer"),
    any("send_timeout"),
    any("keepalive_timeout"),
    any("keepalive_requests"),
    any("keepalive_disable"),
    any("lingering_close"),
    any("lingering_time"),
    any("lingering_timeout"),
    any("tcp_nodelay"),
    any("tcp_nopush"),
    any("postpone_output"),
    any("chunked_transfer_encoding"),
    any("max_ranges"),
    any("msie_padding"),
    any("msie_refresh"),
    any("absolute_redirect"),
    any("port_in_redirect"),
    any("server_name_in_redirect"),
    any("error_page"),
    any("recursive_error_pages"),
    any("log_not_found"),
    any("log_subrequest"),
    ("access_log", Args::Log, None),
    ("error_log", Args::Log, None),
    any("gzip"),
    any("gzip_types"),
    any("gzip_comp_level"),
    any("gzip_min_length"),
    any("gzip_proxied"),
    any("gzip_vary"),
    any("gzip_http_version"),
    any("gzip_disable"),
    any("gzip_buffers"),
    any("gunzip"),
    any("gunzip_buffers"),
    any("sub_filter"),
    any("sub_filter_once"),
    any("sub_filter_types"),
    any("sub_filter_last_modified"),
    any("empty_gif"),
    any("mirror"),
    any("mirror_request_body"),
    any("modsecurity"),
    any("modsecurity_transaction_id"),
];

/// Blocks inside a location: a nested location, `if`, `limit_except`.
const LOCATION_BLOCKS: &[Rule] = &[
    ("location", Args::Any, Some(Block::Location)),
    ("if", Args::Condition, Some(Block::Location)),
    ("limit_except", Args::Any, Some(Block::Location)),
];

/// What a server block holds beyond a location's.
const SERVER_ONLY: &[Rule] = &[
    any("ssl_protocols"),
    any("ssl_ciphers"),
    any("ssl_prefer_server_ciphers"),
    any("ssl_session_timeout"),
    any("ssl_session_tickets"),
    any("ssl_buffer_size"),
    any("ssl_verify_client"),
    any("ssl_verify_depth"),
    any("ssl_early_data"),
    any("ssl_ecdh_curve"),
    any("http2_max_field_size"),
    any("http2_max_header_size"),
    any("http2_max_requests"),
    any("http2_idle_timeout"),
    any("http2_recv_timeout"),
    any("http2_body_preread_size"),
    any("http2_chunk_size"),
    any("large_client_header_buffers"),
    any("client_header_buffer_size"),
    any("client_header_timeout"),
    any("ignore_invalid_headers"),
    any("underscores_in_headers"),
    any("merge_slashes"),
];

/// The http block's own: shared zones, log formats, maps, upstreams.
const HTTP_ONLY: &[Rule] = &[
    ("map", Args::MapResult, Some(Block::Pairs)),
    ("split_clients", Args::MapResult, Some(Block::Pairs)),
    ("upstream", Args::Any, Some(Block::HttpUpstream)),
    any("limit_req_zone"),
    any("limit_conn_zone"),
    any("log_format"),
];

const HTTP_UPSTREAM: &[Rule] = &[
    ("server", Args::UpstreamServer, None),
    any("keepalive"),
    any("keepalive_timeout"),
    any("keepalive_requests"),
    any("keepalive_time"),
    any("least_conn"),
    any("ip_hash"),
    any("hash"),
    any("random"),
];

const STREAM: &[Rule] = &[
    ("server", Args::Any, Some(Block::StreamServer)),
    ("upstream", Args::Any, Some(Block::StreamUpstream)),
    ("map", Args::MapResult, Some(Block::Pairs)),
    any("limit_conn_zone"),
    any("log_format"),
];

const STREAM_SERVER: &[Rule] = &[
    ("listen", Args::Listen, None),
    ("proxy_pass", Args::Target, None),
    any("proxy_timeout"),
    any("proxy_connect_timeout"),
    any("proxy_protocol"),
    any("proxy_buffer_size"),
    any("proxy_download_rate"),
    any("proxy_upload_rate"),
    any("proxy_next_upstream"),
    any("proxy_next_upstream_tries"),
    any("proxy_next_upstream_timeout"),
    any("proxy_responses"),
    any("proxy_requests"),
    any("proxy_socket_keepalive"),
    any("proxy_ssl"),
    any("proxy_ssl_server_name"),
    any("proxy_ssl_name"),
    any("proxy_ssl_verify"),
    any("proxy_ssl_verify_depth"),
    any("proxy_ssl_protocols"),
    any("proxy_ssl_ciphers"),
    any("proxy_ssl_session_reuse"),
    any("ssl_preread"),
    any("preread_buffer_size"),
    any("preread_timeout"),
    any("allow"),
    any("deny"),
    any("limit_conn"),
    any("limit_conn_log_level"),
    any("tcp_nodelay"),
    any("return"),
    ("set", Args::Variable, None),
    ("access_log", Args::Log, None),
    ("error_log", Args::Log, None),
];

const STREAM_UPSTREAM: &[Rule] = &[
    ("server", Args::UpstreamServer, None),
    any("hash"),
    any("least_conn"),
    any("random"),
];

/// The rules of a block, in the order the documentation lists them.
fn rules(block: Block) -> Vec<&'static [Rule]> {
    match block {
        Block::Location => vec![
            HEADERS_AND_REWRITES,
            PROXYING,
            REQUEST_HANDLING,
            LOCATION_BLOCKS,
        ],
        Block::Server => vec![
            HEADERS_AND_REWRITES,
            PROXYING,
            REQUEST_HANDLING,
            LOCATION_BLOCKS,
            SERVER_ONLY,
        ],
        Block::Http => vec![HEADERS_AND_REWRITES, PROXYING, REQUEST_HANDLING, HTTP_ONLY],
        Block::HttpUpstream => vec![HTTP_UPSTREAM],
        Block::Stream => vec![STREAM],
        Block::StreamServer => vec![STREAM_SERVER],
        Block::StreamUpstream => vec![STREAM_UPSTREAM],
        Block::Pairs => vec![],
    }
}

fn find(block: Block, name: &str) -> Option<&'static Rule> {
    rules(block)
        .into_iter()
        .flatten()
        .find(|(n, _, _)| *n == name)
}

/// Names whose family is refused outright, for a clearer message.
fn dangerous(name: &str) -> bool {
    const FAMILIES: &[&str] = &[
        "_by_lua",
        "lua_",
        "js_",
        "perl",
        "include",
        "load_module",
        "root",
        "alias",
        "_file",
        "_path",
        "certificate",
        "_crl",
        "_conf_command",
        "_key_log",
        "_store",
        "_cache",
        "listen",
        "ssi",
        "try_files",
        "secure_link",
        "ssl_engine",
    ];
    FAMILIES.iter().any(|f| name.contains(f))
}

/// The refusal of `name` when no block a snippet of `kind` may reach allows it.
pub(super) fn refused_everywhere(kind: Kind, name: &[u8]) -> Option<String> {
    let name = String::from_utf8_lossy(name);
    let blocks = [
        Block::Location,
        Block::Server,
        Block::Http,
        Block::HttpUpstream,
        Block::Stream,
        Block::StreamServer,
        Block::StreamUpstream,
    ];
    if blocks.iter().any(|&b| find(b, &name).is_some()) {
        return None;
    }
    Some(not_allowed(kind, &name))
}

fn not_allowed(kind: Kind, name: &str) -> String {
    let why = if dangerous(name) {
        "it runs code, reads or writes files, or listens"
    } else {
        "it is not on the allowlist of snippet directives (docs/annotations.md)"
    };
    format!(
        "the directive {} is not allowed in a {} snippet: {why}",
        name.escape_debug(),
        kind.noun()
    )
}

/// Checks every statement of a snippet of `kind`, blocks included.
pub(super) fn check(kind: Kind, statements: &[Statement], cx: &Context<'_>) -> Result<(), String> {
    walk(kind, kind.block(), statements, cx)
}

fn walk(
    kind: Kind,
    block: Block,
    statements: &[Statement],
    cx: &Context<'_>,
) -> Result<(), String> {
    for st in statements {
        let name = st.name();
        if block == Block::Pairs {
            // A map's entries are pairs; `include` would read a file into it.
            if st.block.is_some() || name == "include" {
                return Err(format!("{name} is not a map entry a snippet may hold"));
            }
            continue;
        }
        let Some(&(_, args, opens)) = find(block, &name) else {
            return Err(not_allowed(kind, &name));
        };
        check_args(&name, args, st, cx)?;
        match (opens, &st.block) {
            (Some(inner), Some(statements)) => walk(kind, inner, statements, cx)?,
            (None, None) => {}
            (Some(_), None) => return Err(format!("{name} needs a block")),
            (None, Some(_)) => return Err(format!("{name} does not open a block")),
        }
    }
    Ok(())
}

fn check_args(name: &str, args: Args, st: &Statement, cx: &Context<'_>) -> Result<(), String> {
    let first = st.arg(0).unwrap_or_default();
    match args {
        Args::Any => Ok(()),
        Args::Log => match first.as_str() {
            "off" | "/dev/stdout" | "/dev/stderr" | "stderr" => Ok(()),
            to if to.starts_with("syslog:") => Ok(()),
            to => Err(format!(
                "{name} {} writes a file; a snippet's logs go to off, stdout, stderr or syslog",
                to.escape_debug()
            )),
        },
        Args::Target | Args::UpstreamServer => {
            targets::check(&first).map_err(|why| format!("{name} {}: {why}", first.escape_debug()))
        }
        Args::Variable | Args::MapResult => {
            let var = if args == Args::MapResult {
                st.arg(1).unwrap_or_default()
            } else {
                first
            };
            if var.to_ascii_lowercase().starts_with("$ferrule_") {
                return Err(format!(
                    "{name} {}: variables named $ferrule_* are Ferrule's (they choose the backend)",
                    var.escape_debug()
                ));
            }
            Ok(())
        }
        Args::Condition => {
            let tests_a_file = st.words[1..].iter().any(|w| {
                let w = String::from_utf8_lossy(w);
                let w = w.trim_start_matches('(').trim_start_matches('!');
                matches!(w, "-f" | "-d" | "-e" | "-x")
            });
            if tests_a_file {
                return Err("if with a file test (-f, -d, -e, -x) reads the file system".to_owned());
            }
            Ok(())
        }
        Args::Listen => targets::check_listen(&first, cx.reserved_ports)
            .map_err(|why| format!("listen {}: {why}", first.escape_debug())),
    }
}

/// The allowlist as the Markdown section of `docs/annotations.md`.
pub fn markdown() -> String {
    let mut out = String::new();
    let kinds = [
        (Kind::Location, "`configuration-snippet`, `auth-snippet`"),
        (Kind::Server, "`server-snippet`"),
        (Kind::Http, "NGINX Inc's `http-snippets`"),
        (Kind::Stream, "`stream-snippet`"),
    ];
    for (kind, keys) in kinds {
        out.push_str(&format!("- **{}** ({keys}): ", kind.noun()));
        out.push_str(&names(kind.block()));
        out.push('\n');
    }
    let inner = [
        (Block::HttpUpstream, "an http `upstream` block"),
        (Block::StreamServer, "a stream `server` block"),
        (Block::StreamUpstream, "a stream `upstream` block"),
    ];
    for (block, what) in inner {
        out.push_str(&format!("- in {what}: {}\n", names(block)));
    }
    out
}

fn names(block: Block) -> String {
    let all: Vec<String> = rules(block)
        .into_iter()
        .flatten()
        .map(|(n, args, opens)| {
            let mark = match (args, opens) {
                (_, Some(_)) => " {…}",
                (Args::Any, None) => "",
                _ => "*",
            };
            format!("`{n}`{mark}")
        })
        .collect();
    all.join(", ")
}
