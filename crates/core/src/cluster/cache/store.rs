//! One watch cache's contents: the planner's converted objects by key, kept current by
//! watch events, plus the autoscaler's own writes applied at once ("pins") so that the
//! cycle right after an action sees what the action did.
//!
//! Pure (no I/O, `now` is an argument), so every ordering of events and writes is tested
//! here.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// An own write not yet confirmed by the watch is trusted this long at most; after that
/// the watch wins, whatever happened to the write's event.
pub(crate) const PIN_TTL: Duration = Duration::from_secs(60);

/// What the planner's object type says about waking the loop up.
pub(crate) trait Cached: Clone + Send + Sync + 'static {
    /// Why the change from `old` to `new` (`None`: absent) should start a cycle soon.
    fn wake(_old: Option<&Self>, _new: Option<&Self>) -> Option<&'static str> {
        None
    }
}

/// A watch event, with the object already converted (`None` when it cannot be, e.g. an
/// object without a name) and keyed (`namespace/name`, or `name`).
#[derive(Debug, Clone)]
pub(crate) enum Change<V> {
    /// A (re)list starts: what follows replaces everything once it is done.
    Init,
    InitItem {
        key: String,
        value: Option<V>,
    },
    InitDone,
    Apply {
        key: String,
        version: String,
        value: Option<V>,
    },
    Delete {
        key: String,
    },
}

/// What an own write leaves the cache waiting for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Until {
    /// The watch event of this resourceVersion: events before it are older than the write.
    Version(String),
    /// The object's deletion.
    Gone,
}

#[derive(Debug, Clone)]
struct Pin {
    until: Until,
    at: Instant,
}

/// A wake-up reason with the object it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Trigger {
    pub reason: &'static str,
    pub key: String,
}

#[derive(Debug)]
pub(crate) struct Store<V> {
    items: BTreeMap<String, V>,
    pins: HashMap<String, Pin>,
    /// Objects of a (re)list under way.
    buffer: Option<BTreeMap<String, V>>,
    synced: bool,
}

impl<V> Default for Store<V> {
    fn default() -> Self {
        Store {
            items: BTreeMap::new(),
            pins: HashMap::new(),
            buffer: None,
            synced: false,
        }
    }
}

impl<V: Cached> Store<V> {
    pub fn synced(&self) -> bool {
        self.synced
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Every object, in key order (the order a list returns them in).
    pub fn values(&self) -> Vec<V> {
        self.items.values().cloned().collect()
    }

    /// Applies one event; returns the wake-ups it causes. The first complete list causes
    /// none: the first cycle reads it anyway.
    pub fn apply(&mut self, change: Change<V>, now: Instant) -> Vec<Trigger> {
        let mut out = Vec::new();
        match change {
            Change::Init => self.buffer = Some(BTreeMap::new()),
            Change::InitItem { key, value } => {
                if let (Some(buffer), Some(v)) = (self.buffer.as_mut(), value) {
                    buffer.insert(key, v);
                }
            }
            Change::InitDone => {
                let fresh = self.buffer.take().unwrap_or_default();
                if self.synced {
                    for (key, new) in &fresh {
                        push(&mut out, V::wake(self.items.get(key), Some(new)), key);
                    }
                    for (key, old) in &self.items {
                        if !fresh.contains_key(key) {
                            push(&mut out, V::wake(Some(old), None), key);
                        }
                    }
                }
                // A list is newer than any write made before it; one made while it ran
                // shows up in the watch that follows.
                self.pins.clear();
                self.items = fresh;
                self.synced = true;
            }
            Change::Apply {
                key,
                version,
                value,
            } => {
                if self.held(&key, Some(&version), now) {
                    return out;
                }
                let old = match value {
                    Some(v) => {
                        let wake = V::wake(self.items.get(&key), Some(&v));
                        push(&mut out, wake, &key);
                        self.items.insert(key, v);
                        return out;
                    }
                    None => self.items.remove(&key),
                };
                push(&mut out, V::wake(old.as_ref(), None), &key);
            }
            Change::Delete { key } => {
                self.pins.remove(&key);
                let old = self.items.remove(&key);
                push(&mut out, V::wake(old.as_ref(), None), &key);
            }
        }
        out
    }

    /// Whether an event of `version` for `key` is older than an own write still pinned;
    /// releases the pin when the write's own event (or its expiry) has come.
    fn held(&mut self, key: &str, version: Option<&str>, now: Instant) -> bool {
        let Some(pin) = self.pins.get(key) else {
            return false;
        };
        if now.saturating_duration_since(pin.at) > PIN_TTL {
            self.pins.remove(key);
            return false;
        }
        match (&pin.until, version) {
            (Until::Version(v), Some(got)) if v == got => {
                self.pins.remove(key);
                false
            }
            _ => true,
        }
    }

    /// An own write the API server answered with `value` at `version`: seen at once, and
    /// older watch events for it are ignored until the write's own event arrives.
    pub fn write_through(&mut self, key: String, version: Option<String>, value: V, now: Instant) {
        if !self.synced {
            return;
        }
        match version.filter(|v| !v.is_empty()) {
            Some(v) => {
                self.pins.insert(
                    key.clone(),
                    Pin {
                        until: Until::Version(v),
                        at: now,
                    },
                );
            }
            None => {
                self.pins.remove(&key);
            }
        }
        self.items.insert(key, value);
    }

    /// Changes the value of `key` in place, if it is held; the next watch event for it
    /// replaces it as usual.
    pub fn modify(&mut self, key: &str, f: impl FnOnce(&mut V)) {
        if let Some(v) = self.items.get_mut(key) {
            f(v);
        }
    }

    /// An own delete that succeeded: the object is gone now, whatever older events say.
    pub fn forget(&mut self, key: &str, now: Instant) {
        if !self.synced {
            return;
        }
        self.items.remove(key);
        self.pins.insert(
            key.to_string(),
            Pin {
                until: Until::Gone,
                at: now,
            },
        );
    }
}

fn push(out: &mut Vec<Trigger>, reason: Option<&'static str>, key: &str) {
    if let Some(reason) = reason {
        out.push(Trigger {
            reason,
            key: key.to_string(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in object: a version string and whether it is "unschedulable".
    #[derive(Debug, Clone, PartialEq)]
    struct Obj(&'static str, bool);

    impl Cached for Obj {
        fn wake(old: Option<&Self>, new: Option<&Self>) -> Option<&'static str> {
            match (old, new) {
                (o, Some(n)) if n.1 && !o.is_some_and(|o| o.1) => Some("up"),
                (Some(_), None) => Some("gone"),
                _ => None,
            }
        }
    }

    fn apply(key: &str, version: &'static str, up: bool) -> Change<Obj> {
        Change::Apply {
            key: key.into(),
            version: version.into(),
            value: Some(Obj(version, up)),
        }
    }

    fn item(key: &str, v: &'static str, up: bool) -> Change<Obj> {
        Change::InitItem {
            key: key.into(),
            value: Some(Obj(v, up)),
        }
    }

    fn synced(items: &[(&str, &'static str, bool)]) -> (Store<Obj>, Instant) {
        let now = Instant::now();
        let mut s = Store::default();
        s.apply(Change::Init, now);
        for (k, v, up) in items {
            s.apply(item(k, v, *up), now);
        }
        assert!(!s.synced());
        assert!(
            s.apply(Change::InitDone, now).is_empty(),
            "first list wakes nothing"
        );
        assert!(s.synced());
        (s, now)
    }

    #[test]
    fn events_keep_the_store_current_and_wake_on_rising_edges() {
        let (mut s, now) = synced(&[("b", "1", false), ("a", "1", true)]);
        assert_eq!(
            s.values(),
            vec![Obj("1", true), Obj("1", false)],
            "key order"
        );
        let t = s.apply(apply("b", "2", true), now);
        assert_eq!(
            t,
            vec![Trigger {
                reason: "up",
                key: "b".into()
            }]
        );
        assert!(s.apply(apply("b", "3", true), now).is_empty(), "no edge");
        let t = s.apply(Change::Delete { key: "a".into() }, now);
        assert_eq!(t[0].reason, "gone");
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn a_relist_replaces_everything_and_wakes_for_what_changed_meanwhile() {
        let (mut s, now) = synced(&[("a", "1", false), ("b", "1", false)]);
        s.apply(Change::Init, now);
        s.apply(item("a", "5", true), now);
        s.apply(item("c", "5", false), now);
        // Until the list is complete the old contents are served.
        assert_eq!(s.len(), 2);
        let mut t = s.apply(Change::InitDone, now);
        t.sort_by(|x, y| x.key.cmp(&y.key));
        assert_eq!(
            t,
            vec![
                Trigger {
                    reason: "up",
                    key: "a".into()
                },
                Trigger {
                    reason: "gone",
                    key: "b".into()
                }
            ]
        );
        assert_eq!(s.values(), vec![Obj("5", true), Obj("5", false)]);
    }

    #[test]
    fn an_own_write_is_seen_at_once_and_older_events_do_not_undo_it() {
        let (mut s, now) = synced(&[("a", "1", false)]);
        s.write_through("a".into(), Some("3".into()), Obj("3", true), now);
        assert_eq!(s.values(), vec![Obj("3", true)]);
        // An event from before the write arrives late: ignored.
        s.apply(apply("a", "2", false), now);
        assert_eq!(s.values(), vec![Obj("3", true)]);
        // The write's own event releases the pin; later events apply again.
        s.apply(apply("a", "3", true), now);
        s.apply(apply("a", "4", false), now);
        assert_eq!(s.values(), vec![Obj("4", false)]);
    }

    #[test]
    fn an_own_delete_hides_the_object_until_its_delete_event() {
        let (mut s, now) = synced(&[("a", "1", false)]);
        s.forget("a", now);
        assert!(s.values().is_empty());
        assert!(s.apply(apply("a", "2", false), now).is_empty());
        assert!(
            s.values().is_empty(),
            "an older modification does not resurrect it"
        );
        let t = s.apply(Change::Delete { key: "a".into() }, now);
        assert!(t.is_empty(), "our own delete wakes nothing");
        // Created again under the same name: seen.
        s.apply(apply("a", "9", false), now);
        assert_eq!(s.values(), vec![Obj("9", false)]);
    }

    #[test]
    fn pins_expire_and_a_relist_clears_them() {
        let (mut s, now) = synced(&[("a", "1", false)]);
        s.write_through("a".into(), Some("7".into()), Obj("7", true), now);
        let later = now + PIN_TTL + Duration::from_secs(1);
        s.apply(apply("a", "8", false), later);
        assert_eq!(s.values(), vec![Obj("8", false)], "an expired pin yields");
        s.forget("a", now);
        s.apply(Change::Init, now);
        s.apply(item("a", "9", false), now);
        s.apply(Change::InitDone, now);
        s.apply(apply("a", "10", true), now);
        assert_eq!(
            s.values(),
            vec![Obj("10", true)],
            "the relist dropped the pin"
        );
    }

    #[test]
    fn writes_before_the_first_sync_are_left_to_the_list() {
        let now = Instant::now();
        let mut s: Store<Obj> = Store::default();
        s.write_through("a".into(), Some("1".into()), Obj("1", true), now);
        s.forget("b", now);
        assert_eq!(s.len(), 0);
        assert!(!s.synced());
    }
}
