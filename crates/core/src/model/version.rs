//! Kubernetes versions as the API server (`/version`'s `gitVersion`) and the kubelet
//! (`status.nodeInfo.kubeletVersion`) report them: `v1.31.4`, `v1.31.4+k3s1`,
//! `v1.32.0-rc.1+rke2r1`. Nodes follow the control plane's version, and none may be
//! newer than it (the Kubernetes version skew policy), so both are compared here.

use std::cmp::Ordering;
use std::fmt;

use serde::Serialize;

/// A parsed `v<major>.<minor>.<patch>[-<pre>][+<build>]`. Ordered by the Kubernetes
/// release alone (major, minor, patch, then pre-release before release): the build part
/// (`k3s1`, `k3s2`) names a distribution's repackaging of the same release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KubeVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
    /// After `-`, e.g. `rc.1`; empty for a release.
    pub pre: String,
    /// After `+`, e.g. `k3s1`; empty for upstream Kubernetes.
    pub build: String,
}

impl KubeVersion {
    /// Parses a gitVersion or kubeletVersion; `None` when it is not one.
    pub fn parse(s: &str) -> Option<KubeVersion> {
        let s = s.trim();
        let rest = s.strip_prefix('v').unwrap_or(s);
        let (rest, build) = rest.split_once('+').unwrap_or((rest, ""));
        let (core, pre) = rest.split_once('-').unwrap_or((rest, ""));
        let mut parts = core.split('.');
        let mut number = || parts.next().and_then(|p| p.parse::<u32>().ok());
        let (major, minor, patch) = (number()?, number()?, number()?);
        if parts.next().is_some() {
            return None;
        }
        Some(KubeVersion {
            major,
            minor,
            patch,
            pre: pre.to_string(),
            build: build.to_string(),
        })
    }

    /// The Kubernetes release without pre-release or build parts: `v1.31.4`.
    pub fn release(&self) -> String {
        format!("v{}.{}.{}", self.major, self.minor, self.patch)
    }

    /// Whether this is a k3s build (`+k3s1`).
    pub fn is_k3s(&self) -> bool {
        self.build.starts_with("k3s")
    }

    /// Compares the Kubernetes releases (see the type's docs).
    pub fn cmp_release(&self, other: &KubeVersion) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (false, true) => Ordering::Less,
                (true, false) => Ordering::Greater,
                (false, false) => self.pre.cmp(&other.pre),
            })
    }

    /// Whether this release is older than `other`'s.
    pub fn older_than(&self, other: &KubeVersion) -> bool {
        self.cmp_release(other) == Ordering::Less
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.release())?;
        if !self.pre.is_empty() {
            write!(f, "-{}", self.pre)?;
        }
        if !self.build.is_empty() {
            write!(f, "+{}", self.build)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k3s_and_upstream_versions_parse_and_compare_by_release() {
        let k3s = KubeVersion::parse("v1.31.4+k3s1").expect("k3s gitVersion");
        assert_eq!((k3s.major, k3s.minor, k3s.patch), (1, 31, 4));
        assert!(k3s.is_k3s());
        assert_eq!(k3s.release(), "v1.31.4");
        assert_eq!(k3s.to_string(), "v1.31.4+k3s1");
        let upstream = KubeVersion::parse("v1.31.4").expect("upstream");
        assert!(!upstream.is_k3s());
        assert_eq!(k3s.cmp_release(&upstream), Ordering::Equal);
        let k3s2 = KubeVersion::parse("v1.31.4+k3s2").expect("repackaged");
        assert!(!k3s.older_than(&k3s2));
        let next = KubeVersion::parse("v1.32.0+k3s1").expect("next minor");
        assert!(k3s.older_than(&next));
        let rc = KubeVersion::parse("v1.32.0-rc.1+k3s1").expect("release candidate");
        assert!(rc.older_than(&next));
        assert!(k3s.older_than(&rc));
        assert_eq!(rc.to_string(), "v1.32.0-rc.1+k3s1");
    }

    #[test]
    fn what_is_not_a_version_is_refused() {
        for bad in ["", "v1.31", "1.31.x", "v1.31.4.5", "latest", "stable"] {
            assert_eq!(KubeVersion::parse(bad), None, "{bad}");
        }
    }
}
