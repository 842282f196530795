//! One watch cache's contents: the planner's converted objects by key, kept current by
//! watch events, plus the autoscaler's own writes applied at once ("pins") so that the
//! cycle right after an action sees what the action did.
//!
//! An own write and the watch race: the write's event may come before the API answer
//! that carries the same resourceVersion. Versions are compared as Kubernetes defines
//! them since 1.35 (KEP-5504: decimal integers, greater is newer) so that neither order
//! loses an event; where a version is not of that form, a pin only holds events back for
//! `PIN_TTL` and the newest one held is applied when it expires.
//!
//! Pure (no I/O, `now` is an argument), so every ordering of events and writes is tested
//! here.

use std::cmp::Ordering;
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
        version: String,
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

/// A resourceVersion in the comparable form (a decimal integer without leading zeros,
/// not zero); `None` for anything else, which is then only ever tested for equality.
fn comparable(version: &str) -> Option<u64> {
    if version.starts_with('0') || !version.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    version.parse().ok()
}

/// How `a` stands to `b`, when both versions are comparable.
fn compare(a: &str, b: &str) -> Option<Ordering> {
    Some(comparable(a)?.cmp(&comparable(b)?))
}

/// What an own write leaves the cache waiting for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Until {
    /// The watch event of this resourceVersion (or a newer one): events before it are
    /// older than the write.
    Version(String),
    /// The object's deletion.
    Gone,
}

#[derive(Debug, Clone)]
struct Pin<V> {
    until: Until,
    at: Instant,
    /// The newest event held back that cannot be ordered against the write (see
    /// [`Pin::ordered`]), applied if the pin expires before it is released.
    held: Option<(String, Option<V>)>,
}

/// A wake-up reason with the object it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Trigger {
    pub reason: &'static str,
    pub key: String,
}

/// A cached object and the comparable resourceVersion it was seen at (0: unknown).
#[derive(Debug, Clone)]
struct Entry<V> {
    value: V,
    version: u64,
}

impl<V> Entry<V> {
    fn new(value: V, version: &str) -> Self {
        Entry {
            value,
            version: comparable(version).unwrap_or(0),
        }
    }
}

#[derive(Debug)]
pub(crate) struct Store<V> {
    items: BTreeMap<String, Entry<V>>,
    pins: HashMap<String, Pin<V>>,
    /// Objects of a (re)list under way.
    buffer: Option<BTreeMap<String, Entry<V>>>,
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

    /// Every object, in key order (the order a list returns them in). Call [`Self::expire`]
    /// first so that a pin past its time no longer hides what the watch said.
    pub fn values(&self) -> Vec<V> {
        self.items.values().map(|e| e.value.clone()).collect()
    }

    /// Drops the pins older than `PIN_TTL`, applying the newest event each held back.
    pub fn expire(&mut self, now: Instant) -> Vec<Trigger> {
        let old: Vec<String> = self
            .pins
            .iter()
            .filter(|(_, p)| now.saturating_duration_since(p.at) > PIN_TTL)
            .map(|(k, _)| k.clone())
            .collect();
        let mut out = Vec::new();
        for key in old {
            if let Some((version, value)) = self.pins.remove(&key).and_then(|p| p.held) {
                self.put(&mut out, key, &version, value);
            }
        }
        out
    }

    /// Applies one event; returns the wake-ups it causes. The first complete list causes
    /// none: the first cycle reads it anyway.
    pub fn apply(&mut self, change: Change<V>, now: Instant) -> Vec<Trigger> {
        let mut out = self.expire(now);
        match change {
            Change::Init => self.buffer = Some(BTreeMap::new()),
            Change::InitItem {
                key,
                version,
                value,
            } => {
                if let (Some(buffer), Some(v)) = (self.buffer.as_mut(), value) {
                    buffer.insert(key, Entry::new(v, &version));
                }
            }
            Change::InitDone => {
                let fresh = self.buffer.take().unwrap_or_default();
                if self.synced {
                    for (key, new) in &fresh {
                        let old = self.items.get(key).map(|e| &e.value);
                        push(&mut out, V::wake(old, Some(&new.value)), key);
                    }
                    for (key, old) in &self.items {
                        if !fresh.contains_key(key) {
                            push(&mut out, V::wake(Some(&old.value), None), key);
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
                if let Some(pin) = self.pins.get_mut(&key) {
                    if pin.holds(&version) {
                        if !pin.ordered(&version) {
                            pin.held = Some((version, value));
                        }
                        return out;
                    }
                    self.pins.remove(&key);
                }
                self.put(&mut out, key, &version, value);
            }
            Change::Delete { key } => {
                self.pins.remove(&key);
                let old = self.items.remove(&key);
                push(
                    &mut out,
                    V::wake(old.as_ref().map(|e| &e.value), None),
                    &key,
                );
            }
        }
        out
    }

    /// Stores (or, for an object that cannot be converted, drops) what the watch said.
    fn put(&mut self, out: &mut Vec<Trigger>, key: String, version: &str, value: Option<V>) {
        match value {
            Some(v) => {
                let old = self.items.get(&key).map(|e| &e.value);
                push(out, V::wake(old, Some(&v)), &key);
                self.items.insert(key, Entry::new(v, version));
            }
            None => {
                let old = self.items.remove(&key);
                push(out, V::wake(old.as_ref().map(|e| &e.value), None), &key);
            }
        }
    }

    /// An own write the API server answered with `value` at `version`: seen at once, and
    /// older watch events for it are ignored until the write's own event arrives. A write
    /// the watch has already shown (its event came first) changes nothing.
    pub fn write_through(&mut self, key: String, version: Option<String>, value: V, now: Instant) {
        if !self.synced {
            return;
        }
        let version = version.filter(|v| !v.is_empty());
        if let (Some(v), Some(seen)) = (&version, self.items.get(&key)) {
            if comparable(v).is_some_and(|v| seen.version >= v) {
                return;
            }
        }
        match &version {
            Some(v) => {
                self.pins.insert(
                    key.clone(),
                    Pin {
                        until: Until::Version(v.clone()),
                        at: now,
                        held: None,
                    },
                );
            }
            None => {
                self.pins.remove(&key);
            }
        }
        let entry = Entry::new(value, version.as_deref().unwrap_or_default());
        self.items.insert(key, entry);
    }

    /// Changes the value of `key`, if it is held; the next watch event for it replaces it
    /// as usual.
    pub fn modify(&mut self, key: &str, f: impl FnOnce(&mut V)) {
        if let Some(e) = self.items.get_mut(key) {
            f(&mut e.value);
        }
    }

    /// An own delete that succeeded: the object is gone now, whatever older events say.
    /// When the watch has already dropped it, its deletion event came first: nothing older
    /// can follow, so nothing is held back.
    pub fn forget(&mut self, key: &str, now: Instant) {
        if !self.synced || self.items.remove(key).is_none() {
            return;
        }
        self.pins.insert(
            key.to_string(),
            Pin {
                until: Until::Gone,
                at: now,
                held: None,
            },
        );
    }
}

impl<V> Pin<V> {
    /// Whether `version` is known to be older or newer than the pinned write; an event
    /// held back as older is then never wanted again.
    fn ordered(&self, version: &str) -> bool {
        matches!(&self.until, Until::Version(v) if compare(version, v).is_some())
    }

    /// Whether the event of `version` is older than the pinned write, so held back.
    fn holds(&self, version: &str) -> bool {
        match &self.until {
            Until::Gone => true,
            Until::Version(v) => match compare(version, v) {
                Some(o) => o == Ordering::Less,
                None => version != v,
            },
        }
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
            version: v.into(),
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

    /// The faults suite's image puller stayed Pending in the cache for good: its ADDED
    /// event came before the create's answer, so the pin waited for a version already
    /// gone by and held back every later event, the last one (Succeeded) included.
    #[test]
    fn an_own_write_whose_event_came_first_hides_no_later_event() {
        let (mut s, now) = synced(&[]);
        s.apply(apply("p", "40", false), now);
        s.write_through("p".into(), Some("40".into()), Obj("40", false), now);
        s.apply(apply("p", "42", true), now);
        assert_eq!(s.values(), vec![Obj("42", true)]);
        // The answer of a write comes after newer events: the cache keeps the newer.
        s.apply(apply("p", "45", false), now);
        s.write_through("p".into(), Some("44".into()), Obj("44", true), now);
        assert_eq!(s.values(), vec![Obj("45", false)]);
    }

    #[test]
    fn comparable_versions_release_a_pin_at_or_after_the_write_and_never_replay_older() {
        let (mut s, now) = synced(&[("a", "9", false)]);
        s.write_through("a".into(), Some("20".into()), Obj("20", true), now);
        s.apply(apply("a", "19", false), now);
        assert_eq!(s.values(), vec![Obj("20", true)], "older: held back");
        let later = now + PIN_TTL + Duration::from_secs(1);
        s.expire(later);
        assert_eq!(
            s.values(),
            vec![Obj("20", true)],
            "an event known to be older is not replayed"
        );
        s.write_through("a".into(), Some("30".into()), Obj("30", true), now);
        // "100" is newer than "30" though it sorts before it as text.
        s.apply(apply("a", "100", false), now);
        assert_eq!(s.values(), vec![Obj("100", false)], "newer: applied");
        s.apply(apply("a", "101", true), now);
        assert_eq!(s.values(), vec![Obj("101", true)], "and the pin is gone");
    }

    #[test]
    fn opaque_versions_replay_the_newest_held_event_when_the_pin_expires() {
        let (mut s, now) = synced(&[("a", "x1", false)]);
        s.write_through("a".into(), Some("x3".into()), Obj("x3", true), now);
        s.apply(apply("a", "x2", false), now);
        s.apply(apply("a", "x4", false), now);
        assert_eq!(s.values(), vec![Obj("x3", true)], "held while pinned");
        assert!(s.expire(now).is_empty());
        s.expire(now + PIN_TTL + Duration::from_secs(1));
        assert_eq!(s.values(), vec![Obj("x4", false)], "the watch wins");
    }

    #[test]
    fn an_own_delete_whose_event_came_first_hides_nothing() {
        let (mut s, now) = synced(&[("a", "1", false)]);
        s.apply(Change::Delete { key: "a".into() }, now);
        s.forget("a", now);
        // Created again under the same name (a kubelet registering its node again).
        s.apply(apply("a", "5", true), now);
        assert_eq!(s.values(), vec![Obj("5", true)]);
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
