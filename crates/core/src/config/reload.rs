//! Re-reading the config file while the loop runs (a mounted ConfigMap is updated in
//! place; a person edits the file). Only a whole file is taken: one written in the last
//! moment may still be half written (a truncated file can be valid YAML with fewer
//! groups), so it is taken once it has been left alone for [`SETTLE`]; one that does not
//! parse and validate leaves the last good config in force; a file that is gone is said
//! once, and the last good config stays.

use std::io::ErrorKind;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::Config;

/// A file changed more recently than this may still be being written.
pub const SETTLE: Duration = Duration::from_secs(2);

/// What one look at the file found.
#[derive(Debug)]
pub enum Reload {
    /// The text in force.
    Unchanged,
    /// New text, changed too recently to be sure it is whole; looked at again next time.
    Settling,
    /// New, whole and valid: put it in force.
    New(Box<Config>),
    /// New and whole but invalid (the error was logged); the last good config stays.
    Invalid,
    /// The file cannot be read (gone, or no permission); said once until it is back.
    Unreadable,
}

pub struct ConfigWatch {
    path: PathBuf,
    last_text: String,
    unreadable_said: bool,
}

impl ConfigWatch {
    /// Watches `path`, whose `text` is in force now.
    pub fn new(path: PathBuf, text: String) -> ConfigWatch {
        ConfigWatch {
            path,
            last_text: text,
            unreadable_said: false,
        }
    }

    /// Looks at the file once, at `now`.
    pub fn poll(&mut self, now: SystemTime) -> Reload {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) => {
                if !self.unreadable_said {
                    self.unreadable_said = true;
                    let why = if e.kind() == ErrorKind::NotFound {
                        "is gone".to_string()
                    } else {
                        format!("cannot be read ({e})")
                    };
                    tracing::warn!(
                        path = %self.path.display(),
                        "config file {why}; the last good config stays in force until it is back"
                    );
                }
                return Reload::Unreadable;
            }
        };
        if self.unreadable_said {
            self.unreadable_said = false;
            tracing::info!(path = %self.path.display(), "config file is back");
        }
        if text == self.last_text {
            return Reload::Unchanged;
        }
        let modified = std::fs::metadata(&self.path).and_then(|m| m.modified());
        let settled = match modified {
            // A clock set back, or a file from the future: wait until it is in the past.
            Ok(m) => now.duration_since(m).is_ok_and(|age| age >= SETTLE),
            // No modification time on this file system: the text alone decides.
            Err(_) => true,
        };
        if !settled {
            return Reload::Settling;
        }
        self.last_text = text;
        match Config::load(&self.path) {
            Ok(c) => {
                tracing::info!(path = %self.path.display(), "config changed; new config in force");
                c.log_warnings();
                Reload::New(Box::new(c))
            }
            Err(e) => {
                tracing::error!(error = %e, "config changed but is invalid; keeping the last good config");
                Reload::Invalid
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GROUP: &str = "  - name: GROUP\n    provider: openstack\n    maxSize: 2\n    openstack: {flavor: m1.small, image: img, network: net}\n    userData: {template: t.yaml.j2}\n";

    fn config(groups: &[&str]) -> String {
        let mut s =
            String::from("clusterName: c\ntemplatesDir: .\nfreeMemoryTarget: 1 GiB\nnodeGroups:\n");
        for g in groups {
            s.push_str(&GROUP.replace("GROUP", g));
        }
        s
    }

    fn age(path: &std::path::Path, secs: u64) {
        let f = std::fs::File::options()
            .append(true)
            .open(path)
            .expect("open");
        f.set_modified(SystemTime::now() - Duration::from_secs(secs))
            .expect("set mtime");
    }

    #[test]
    fn a_half_written_config_is_not_put_in_force_until_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("t.yaml.j2"), "#cloud-config\n").expect("template");
        let path = dir.path().join("autoscaler.yaml");
        let whole = config(&["a", "b", "c"]);
        std::fs::write(&path, &whole).expect("write");
        let mut w = ConfigWatch::new(path.clone(), whole.clone());
        assert!(matches!(w.poll(SystemTime::now()), Reload::Unchanged));

        // The writer has put down one group of three so far: valid YAML, but not whole.
        let partial = config(&["a"]);
        std::fs::write(&path, &partial).expect("write");
        assert!(matches!(w.poll(SystemTime::now()), Reload::Settling));
        // Finished a moment later and then left alone: the whole file is taken.
        let edited = config(&["a", "b", "d"]);
        std::fs::write(&path, &edited).expect("write");
        assert!(matches!(w.poll(SystemTime::now()), Reload::Settling));
        age(&path, 5);
        match w.poll(SystemTime::now()) {
            Reload::New(c) => {
                let names: Vec<&str> = c.node_groups.iter().map(|g| g.name.as_str()).collect();
                assert_eq!(names, ["a", "b", "d"]);
            }
            other => panic!("expected the new config, got {other:?}"),
        }
        assert!(matches!(w.poll(SystemTime::now()), Reload::Unchanged));
    }

    #[test]
    fn an_invalid_or_deleted_config_keeps_the_last_good_one_and_says_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("t.yaml.j2"), "#cloud-config\n").expect("template");
        let path = dir.path().join("autoscaler.yaml");
        let whole = config(&["a"]);
        std::fs::write(&path, &whole).expect("write");
        let mut w = ConfigWatch::new(path.clone(), whole);
        std::fs::write(&path, "clusterName: c\nnodeGroups: [oops\n").expect("write");
        age(&path, 5);
        assert!(matches!(w.poll(SystemTime::now()), Reload::Invalid));
        std::fs::remove_file(&path).expect("rm");
        assert!(matches!(w.poll(SystemTime::now()), Reload::Unreadable));
        assert!(w.unreadable_said, "a gone file is said");
        assert!(matches!(w.poll(SystemTime::now()), Reload::Unreadable));
        std::fs::write(&path, config(&["a", "b"])).expect("write");
        age(&path, 5);
        assert!(matches!(w.poll(SystemTime::now()), Reload::New(_)));
        assert!(!w.unreadable_said);
    }
}
