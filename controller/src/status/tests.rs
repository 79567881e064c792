//! The status socket: `/status/resources` for a local operator, never for NGINX, even
//! when NGINX's workers run as the controller's user (the image's user 101 runs
//! both). A real NGINX proxies to the socket here, its workers as this process's user.

use std::path::Path;
use std::time::Duration;

use super::*;

/// One resource, so that an answer that has the resources can be told apart.
fn shared() -> Arc<Shared> {
    let shared = Arc::new(Shared::default());
    shared.set_resources(vec![ResourceStatus {
        kind: "Ingress".to_owned(),
        namespace: "bank".to_owned(),
        name: "payments".to_owned(),
        state: ResourceState::Applied,
        message: String::new(),
    }]);
    shared
}

/// An NGINX master (and its workers, in its process group) on `prefix`, killed with
/// its group when dropped.
struct Nginx(std::process::Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

/// Starts NGINX on `prefix` as Ferrule does (a process group of its own, the pid
/// file in `run/`), its workers running as this process's user, every request
/// proxied to the unix socket `socket`. `None` without an `nginx` binary.
fn nginx_proxying_to(prefix: &Path, socket: &Path, port: u16) -> Option<Nginx> {
    use std::os::unix::process::CommandExt;
    if std::process::Command::new("nginx")
        .arg("-v")
        .output()
        .is_err()
    {
        return None;
    }
    for d in ["conf", "run", "logs", "tmp"] {
        std::fs::create_dir_all(prefix.join(d)).unwrap();
    }
    // As root, NGINX would hand its workers to `nobody`: here they stay root, the
    // controller's user, as they are wherever Ferrule does not run as root.
    let user = match nix::unistd::geteuid().is_root() {
        true => "user root;",
        false => "",
    };
    let conf = prefix.join("conf/nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "{user}\ndaemon off;\nworker_processes 1;\npid run/nginx.pid;\n\
             error_log logs/error.log;\nevents {{ worker_connections 64; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path tmp/body;\n  \
             proxy_temp_path tmp/proxy;\n  fastcgi_temp_path tmp/fastcgi;\n  \
             uwsgi_temp_path tmp/uwsgi;\n  scgi_temp_path tmp/scgi;\n  \
             server {{\n    listen 127.0.0.1:{port};\n    \
             location / {{ proxy_pass http://unix:{}:/status/resources; }}\n  }}\n}}\n",
            socket.display()
        ),
    )
    .unwrap();
    let child = std::process::Command::new("nginx")
        .arg("-p")
        .arg(prefix)
        .arg("-c")
        .arg(&conf)
        .process_group(0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    Some(Nginx(child))
}

/// A GET of `/` on `port`: (status, body).
async fn get(port: u16) -> Option<(u16, String)> {
    let r = reqwest::get(format!("http://127.0.0.1:{port}/"))
        .await
        .ok()?;
    Some((r.status().as_u16(), r.text().await.ok()?))
}

#[tokio::test]
async fn nginx_gets_nothing_from_the_status_socket_even_as_the_same_user() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("nginx");
    let socket = prefix.join(SOCKET);
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let Some(_nginx) = nginx_proxying_to(&prefix, &socket, port) else {
        eprintln!("skipped: no nginx binary");
        return;
    };
    tokio::spawn(serve_resources(socket.clone(), prefix.clone(), shared()));

    // The operator (this process: the controller's user, not NGINX) reads them.
    let mut direct = Err(std::io::Error::other("not tried"));
    for _ in 0..100 {
        let s = socket.clone();
        direct = tokio::task::spawn_blocking(move || read_resources(&s))
            .await
            .unwrap();
        if direct.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let direct = direct.unwrap();
    assert!(direct.contains("\"payments\""), "{direct}");

    // NGINX, its workers of the same user, connects and gets a refusal.
    let mut through = None;
    for _ in 0..100 {
        through = get(port).await;
        if through.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, body) = through.expect("NGINX answers");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("NGINX"), "{body}");
    assert!(!body.contains("payments"), "{body}");
}

#[tokio::test]
async fn the_socket_is_the_users_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("nginx");
    let socket = prefix.join(SOCKET);
    // A socket an earlier controller left is replaced.
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    tokio::spawn(serve_resources(socket.clone(), prefix.clone(), shared()));
    let mut read = Err(std::io::Error::other("not tried"));
    for _ in 0..100 {
        let s = socket.clone();
        read = tokio::task::spawn_blocking(move || read_resources(&s))
            .await
            .unwrap();
        if read.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(read.unwrap().contains("\"payments\""));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600);
    // The directory it made, as it made it (this one existed: see above).
    let fresh = dir.path().join("fresh/controller/status.sock");
    tokio::spawn(serve_resources(fresh.clone(), prefix, shared()));
    for _ in 0..100 {
        if fresh.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(mode(fresh.parent().unwrap()), 0o700);
    assert_eq!(mode(&fresh), 0o600);
}
