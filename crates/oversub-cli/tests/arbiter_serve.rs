//! `oversub arbiter serve` as a real process: SIGTERM and SIGINT stop it with status 0 and its /dev/shm file
//! removed; the file of a server killed outright is taken over, a live server's is not; a file that others may
//! write is refused. No timing is asserted (the waits below only bound how long a broken build can hang).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Output, Stdio};
use std::time::Duration;

mod common;
use common::oversub;

fn name(tag: &str) -> String {
    format!("clisig-{tag}-{}", std::process::id())
}

fn shm(name: &str) -> PathBuf {
    PathBuf::from(format!("/dev/shm/oversub-arbiter-{name}"))
}

/// A running `oversub arbiter serve`, killed (SIGKILL) and its file removed if a test fails half-way.
struct Server {
    child: Option<Child>,
    out: Option<BufReader<ChildStdout>>,
    path: PathBuf,
}

impl Server {
    fn start(name: &str, extra: &[&str]) -> Server {
        let child = oversub()
            .args(["arbiter", "serve", "--name", name, "--for", "600s"])
            .args(["--chunk-time", "100us"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Server {
            child: Some(child),
            out: None,
            path: shm(name),
        }
    }

    fn child(&mut self) -> &mut Child {
        self.child.as_mut().unwrap()
    }

    fn pid(&mut self) -> u32 {
        self.child().id()
    }

    /// Until the file exists (the server blocks the stop signals before creating it).
    fn wait_for_file(&mut self) {
        for _ in 0..6000 {
            if self.path.exists() {
                return;
            }
            if let Some(status) = self.child().try_wait().unwrap() {
                let mut err = String::new();
                let _ = self.child().stderr.take().unwrap().read_to_string(&mut err);
                panic!("serve exited early ({status}): {err}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("{} never appeared", self.path.display());
    }

    /// Reads its output up to the line that says it serves (printed once the file is ready): the lines so far.
    /// The reader is kept, so the server can still print when it stops.
    fn read_until_serving(&mut self) -> String {
        let stdout = self.child().stdout.take();
        let out = self
            .out
            .get_or_insert_with(|| BufReader::new(stdout.unwrap()));
        let mut lines = String::new();
        while !lines.contains("serving for") {
            if out.read_line(&mut lines).unwrap() == 0 {
                panic!("serve ended before serving: {lines}");
            }
        }
        lines
    }

    fn signal(&mut self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.pid()).unwrap();
        // SAFETY: kill sends a signal to our own child, which has not been waited for yet (so its pid is ours).
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// Its exit status and the rest of its output.
    fn wait(mut self) -> Output {
        let mut child = self.child.take().unwrap();
        let mut stdout = Vec::new();
        match self.out.take() {
            Some(mut out) => out.read_to_end(&mut stdout).unwrap(),
            None => child
                .stdout
                .take()
                .unwrap()
                .read_to_end(&mut stdout)
                .unwrap(),
        };
        let mut stderr = Vec::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_end(&mut stderr)
            .unwrap();
        Output {
            status: child.wait().unwrap(),
            stdout,
            stderr,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A second `oversub arbiter serve` on `name`, which must be refused: its standard error.
fn refused_server(name: &str) -> String {
    let out = oversub()
        .args(["arbiter", "serve", "--name", name, "--for", "1s"])
        .args(["--chunk-time", "100us"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    text(&out.stderr)
}

#[test]
fn sigterm_and_sigint_stop_the_server_and_remove_its_file() {
    for (signal, signal_name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")] {
        let name = name(signal_name);
        let mut server = Server::start(&name, &[]);
        server.wait_for_file();
        server.signal(signal);
        let out = server.wait();
        assert!(
            out.status.success(),
            "{signal_name}: {}\n{}",
            out.status,
            text(&out.stderr)
        );
        let stdout = text(&out.stdout);
        assert!(
            stdout.contains(&format!("stopped by {signal_name}")) && stdout.contains("done:"),
            "{stdout}"
        );
        assert!(!shm(&name).exists(), "{signal_name} left the file behind");
    }
}

#[test]
fn a_killed_servers_file_is_taken_over_and_a_live_ones_is_not() {
    let name = name("stale");
    let path = shm(&name);
    let mut first = Server::start(&name, &[]);
    first.wait_for_file();
    let first_pid = first.pid();

    let err = refused_server(&name);
    assert!(
        err.contains("in use") && err.contains(&format!("pid {first_pid}")),
        "{err}"
    );

    first.signal(libc::SIGKILL);
    let out = first.wait();
    assert!(!out.status.success());
    assert!(path.exists(), "SIGKILL leaves the file (nothing can run)");

    let mut second = Server::start(&name, &[]);
    let lines = second.read_until_serving();
    assert!(
        lines.contains("took over") && lines.contains(&format!("pid {first_pid}")),
        "{lines}"
    );
    let status = oversub()
        .args(["arbiter", "status", "--name", &name, "--json"])
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", text(&status.stderr));
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["server_pid"], second.pid());

    second.signal(libc::SIGTERM);
    let out = second.wait();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!path.exists());
}

#[test]
fn a_file_others_may_write_is_refused_until_replaced() {
    let name = name("mode");
    let path = shm(&name);
    struct Remove<'a>(&'a Path);
    impl Drop for Remove<'_> {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(self.0);
        }
    }
    let _remove = Remove(&path);
    std::fs::write(&path, vec![0u8; 4096]).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();

    let out = oversub()
        .args(["arbiter", "status", "--name", &name])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("refusing"),
        "{}",
        text(&out.stderr)
    );

    let err = refused_server(&name);
    assert!(
        err.contains("refusing") && err.contains("--replace"),
        "{err}"
    );
    assert!(path.exists(), "a refused file is left alone");

    let mut server = Server::start(&name, &["--replace"]);
    server.read_until_serving();
    server.signal(libc::SIGTERM);
    let out = server.wait();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!path.exists());
}
