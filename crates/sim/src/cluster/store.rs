//! The object store: every object as JSON, one global `resourceVersion` counter bumped on
//! every write, and a bounded history of changes that watches replay from and that lists
//! at an older resourceVersion (continue tokens, `resourceVersionMatch=Exact`) are
//! rebuilt from.
//!
//! Stored objects are immutable and shared (`Arc<Stored>`): a write stores a new one, so
//! the history costs no copies, a list takes a snapshot under the lock by bumping
//! reference counts, and each object is encoded to JSON once however many lists and
//! watches send it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::{Bound, Deref};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use axum::body::Bytes;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};
use tokio::sync::watch;

use super::graceful;
use super::meta::{self, IdGen};
use super::resources::ResourceDef;
use super::status::ApiError;

/// (qualified resource id, namespace or "", name)
type Key = (&'static str, String, String);

/// (namespace or "", name): where a list page resumes.
pub type ListKey = (String, String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "ADDED",
            ChangeKind::Modified => "MODIFIED",
            ChangeKind::Deleted => "DELETED",
        }
    }
}

/// One stored object with its JSON encoding, made on first use.
#[derive(Debug)]
pub struct Stored {
    value: Value,
    /// The encoding without apiVersion and kind: how the real server sends list items.
    item: OnceLock<Bytes>,
}

/// Serializes an object's fields except apiVersion and kind, without copying it.
struct Untyped<'a>(&'a Map<String, Value>);

impl Serialize for Untyped<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let fields = self
            .0
            .iter()
            .filter(|(k, _)| *k != "apiVersion" && *k != "kind");
        let mut m = s.serialize_map(None)?;
        for (k, v) in fields {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl Stored {
    pub fn new(value: Value) -> Arc<Stored> {
        Arc::new(Stored {
            value,
            item: OnceLock::new(),
        })
    }

    pub fn value(&self) -> &Value {
        &self.value
    }

    /// JSON without apiVersion and kind (a list item).
    pub fn item_json(&self) -> &Bytes {
        self.item.get_or_init(|| {
            let bytes = match &self.value {
                Value::Object(m) => serde_json::to_vec(&Untyped(m)),
                other => serde_json::to_vec(other),
            };
            Bytes::from(bytes.unwrap_or_default())
        })
    }

    /// Appends the whole object's JSON (apiVersion and kind first) to `out`.
    pub fn write_full(&self, out: &mut Vec<u8>) {
        let item = self.item_json();
        out.push(b'{');
        let mut typed = false;
        for field in ["apiVersion", "kind"] {
            if let Some(v) = self.value.get(field) {
                if typed {
                    out.push(b',');
                }
                let _ = serde_json::to_writer(&mut *out, field);
                out.push(b':');
                let _ = serde_json::to_writer(&mut *out, v);
                typed = true;
            }
        }
        let rest = item.get(1..).unwrap_or(b"}");
        if typed && rest != b"}" {
            out.push(b',');
        }
        out.extend_from_slice(rest);
    }

    pub fn full_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.item_json().len() + 48);
        self.write_full(&mut out);
        out
    }
}

impl Deref for Stored {
    type Target = Value;
    fn deref(&self) -> &Value {
        &self.value
    }
}

/// One write, kept for watches. `previous` (the object before a modification or
/// deletion) lets a filtered watch turn a modification into ADDED/DELETED when an object
/// starts or stops matching its selector, and lets a list be rebuilt as it was.
#[derive(Debug)]
pub struct Change {
    pub rv: u64,
    pub res: &'static str,
    pub ns: String,
    pub name: String,
    pub kind: ChangeKind,
    pub object: Arc<Stored>,
    pub previous: Option<Arc<Stored>>,
}

/// One page of a list, as the store held it at resourceVersion `rv`.
#[derive(Debug)]
pub struct Page {
    pub items: Vec<Arc<Stored>>,
    pub rv: u64,
    /// Where the next page starts, when objects are left.
    pub next: Option<ListKey>,
}

#[derive(Debug)]
struct Inner {
    rv: u64,
    objects: BTreeMap<Key, Arc<Stored>>,
    history: VecDeque<Arc<Change>>,
    capacity: usize,
    /// Highest resourceVersion whose change was dropped from `history`.
    compacted: u64,
    /// The same window per resource, as the real server's watch cache keeps one per
    /// resource: a burst of pod writes does not expire the node watches.
    by_resource: HashMap<&'static str, Window>,
    ids: IdGen,
}

/// One resource's kept changes.
#[derive(Debug, Default)]
struct Window {
    changes: VecDeque<Arc<Change>>,
    /// Highest resourceVersion whose change of this resource was dropped.
    compacted: u64,
}

#[derive(Debug)]
pub struct Store {
    inner: Mutex<Inner>,
    changed: watch::Sender<u64>,
}

impl Store {
    pub fn new(history_capacity: usize) -> Self {
        Store {
            inner: Mutex::new(Inner {
                rv: 1,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                capacity: history_capacity.max(16),
                compacted: 0,
                by_resource: HashMap::new(),
                ids: IdGen::new(),
            }),
            changed: watch::channel(1).0,
        }
    }

    /// Exclusive access; several reads and writes inside one `Txn` are atomic.
    pub fn lock(&self) -> Txn<'_> {
        Txn {
            inner: self.inner.lock().unwrap_or_else(|p| p.into_inner()),
            changed: &self.changed,
            dirty: false,
        }
    }

    /// Wakes up whenever a transaction that wrote something ends.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

pub struct Txn<'a> {
    inner: MutexGuard<'a, Inner>,
    changed: &'a watch::Sender<u64>,
    dirty: bool,
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        if self.dirty {
            self.changed.send_replace(self.inner.rv);
        }
    }
}

fn key(res: &ResourceDef, ns: &str, name: &str) -> Key {
    let ns = if res.namespaced { ns } else { "" };
    (res.id, ns.to_string(), name.to_string())
}

/// Whether a stored key belongs to a list of `res` in `ns` (all namespaces when None).
fn in_list(res: &ResourceDef, ns: Option<&str>, k: &Key) -> bool {
    k.0 == res.id && ns.is_none_or(|want| !res.namespaced || k.1 == want)
}

impl Txn<'_> {
    pub fn current_rv(&self) -> u64 {
        self.inner.rv
    }

    /// The oldest resourceVersion a watch or list can still start from.
    pub fn oldest_rv(&self) -> u64 {
        self.inner.compacted
    }

    pub fn new_uid(&mut self) -> String {
        self.inner.ids.uid()
    }

    pub fn new_suffix(&mut self) -> String {
        self.inner.ids.suffix(5)
    }

    pub fn get(&self, res: &ResourceDef, ns: &str, name: &str) -> Option<&Value> {
        self.get_stored(res, ns, name).map(|s| s.value())
    }

    pub fn get_stored(&self, res: &ResourceDef, ns: &str, name: &str) -> Option<&Arc<Stored>> {
        self.inner.objects.get(&key(res, ns, name))
    }

    fn range(&self, res: &ResourceDef, ns: Option<&str>) -> impl Iterator<Item = &Arc<Stored>> {
        let start = key(res, ns.unwrap_or(""), "");
        let (id, namespaced) = (res.id, res.namespaced);
        let ns = ns.filter(|_| namespaced).map(str::to_string);
        self.inner
            .objects
            .range(start..)
            .take_while(move |(k, _)| k.0 == id && ns.as_ref().is_none_or(|want| k.1 == *want))
            .map(|(_, v)| v)
    }

    /// Objects of `res`, in one namespace or all, ordered by namespace then name.
    pub fn list(&self, res: &ResourceDef, ns: Option<&str>) -> Vec<&Value> {
        self.range(res, ns).map(|s| s.value()).collect()
    }

    /// Shared handles on the objects: a snapshot that outlives the lock, cheaply.
    pub fn list_stored(&self, res: &ResourceDef, ns: Option<&str>) -> Vec<Arc<Stored>> {
        self.range(res, ns).cloned().collect()
    }

    /// Cloned objects, handy when the caller goes on to write.
    pub fn list_owned(&self, res: &ResourceDef, ns: Option<&str>) -> Vec<Value> {
        self.range(res, ns).map(|s| s.value().clone()).collect()
    }

    fn record(
        &mut self,
        kind: ChangeKind,
        k: &Key,
        object: Arc<Stored>,
        previous: Option<Arc<Stored>>,
    ) {
        let change = Arc::new(Change {
            rv: self.inner.rv,
            res: k.0,
            ns: k.1.clone(),
            name: k.2.clone(),
            kind,
            object,
            previous,
        });
        let capacity = self.inner.capacity;
        let window = self.inner.by_resource.entry(k.0).or_default();
        window.changes.push_back(change.clone());
        while window.changes.len() > capacity {
            if let Some(old) = window.changes.pop_front() {
                window.compacted = old.rv;
            }
        }
        self.inner.history.push_back(change);
        while self.inner.history.len() > capacity {
            if let Some(old) = self.inner.history.pop_front() {
                self.inner.compacted = old.rv;
            }
        }
        self.dirty = true;
    }

    /// Fills in what the server owns on a new object (name from generateName, uid,
    /// resourceVersion, generation, creationTimestamp unless given) and bumps the
    /// resourceVersion.
    fn prepare(
        &mut self,
        res: &'static ResourceDef,
        mut obj: Value,
    ) -> Result<(Key, Value), ApiError> {
        let ns = meta::namespace(&obj).to_string();
        let mut name = meta::name(&obj).to_string();
        if name.is_empty() {
            let prefix = meta::path_str(&obj, &["metadata", "generateName"]).unwrap_or_default();
            if prefix.is_empty() {
                return Err(ApiError::invalid(
                    res,
                    "",
                    "metadata.name: Required value: name or generateName is required",
                ));
            }
            name = format!("{prefix}{}", self.new_suffix());
        }
        if res.namespaced && ns.is_empty() {
            return Err(ApiError::bad_request("the namespace of the provided object does not match the namespace sent on the request"));
        }
        let k = key(res, &ns, &name);
        if self.inner.objects.contains_key(&k) {
            return Err(ApiError::already_exists(res, &name));
        }
        let uid = self.new_uid();
        let obj_map = obj
            .as_object_mut()
            .ok_or_else(|| ApiError::bad_request("object expected"))?;
        obj_map.insert("apiVersion".into(), res.api_version().into());
        obj_map.insert("kind".into(), res.kind.into());
        self.inner.rv += 1;
        let rv = self.inner.rv;
        let md = meta::obj_mut(&mut obj, "metadata");
        md.insert("name".into(), name.into());
        if !res.namespaced {
            md.remove("namespace");
        }
        md.insert("uid".into(), uid.into());
        md.insert("resourceVersion".into(), rv.to_string().into());
        if res.has_generation {
            md.insert("generation".into(), 1.into());
        }
        if md
            .get("creationTimestamp")
            .and_then(Value::as_str)
            .is_none()
        {
            md.insert("creationTimestamp".into(), meta::now_rfc3339().into());
        }
        Ok((k, obj))
    }

    /// Stores a new object. Sets uid, resourceVersion, generation, and a
    /// creationTimestamp unless the caller supplied one (the HTTP layer never does).
    pub fn create(&mut self, res: &'static ResourceDef, obj: Value) -> Result<Value, ApiError> {
        let (k, obj) = self.prepare(res, obj)?;
        let stored = Stored::new(obj);
        self.inner.objects.insert(k.clone(), stored.clone());
        self.record(ChangeKind::Added, &k, stored.clone(), None);
        Ok(stored.value().clone())
    }

    /// Creates many objects at once (seeding a large cluster): each gets its own
    /// resourceVersion as in [`Self::create`], but none is kept in the watch history,
    /// which starts over after them (older watches get 410 Expired). Stops at the first
    /// failure; returns how many were stored.
    pub fn bulk_create(
        &mut self,
        res: &'static ResourceDef,
        objs: impl IntoIterator<Item = Value>,
    ) -> Result<usize, ApiError> {
        let mut n = 0;
        let mut result = Ok(());
        for obj in objs {
            match self.prepare(res, obj) {
                Ok((k, obj)) => {
                    self.inner.objects.insert(k, Stored::new(obj));
                    n += 1;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if n > 0 {
            self.inner.history.clear();
            self.inner.compacted = self.inner.rv;
            let rv = self.inner.rv;
            for w in self.inner.by_resource.values_mut() {
                w.changes.clear();
                w.compacted = rv;
            }
            self.inner.by_resource.entry(res.id).or_default().compacted = rv;
            self.dirty = true;
        }
        result.map(|()| n)
    }

    /// Replaces an object. A non-empty `metadata.resourceVersion` must match the stored
    /// one (optimistic concurrency). Identity fields are kept; an unchanged object is
    /// not written, so watches stay quiet.
    ///
    /// An object being deleted whose last finalizer this update removes is removed as
    /// well, once its grace period is over (`deletionGracePeriodSeconds` 0), as the real
    /// API server does; the answer is the object as updated.
    pub fn update(&mut self, res: &'static ResourceDef, obj: Value) -> Result<Value, ApiError> {
        let (k, old, obj) = self.next_version(res, obj)?;
        if obj == *old.value() {
            return Ok(obj);
        }
        let stored = self.write(k, old, obj);
        if graceful::finished(&stored) {
            self.delete(res, meta::namespace(&stored), meta::name(&stored))?;
        }
        Ok(stored)
    }

    /// Stores `obj` as the next version of `old` (under key `k`) and records the change.
    fn write(&mut self, k: Key, old: Arc<Stored>, mut obj: Value) -> Value {
        self.inner.rv += 1;
        let rv = self.inner.rv;
        meta::obj_mut(&mut obj, "metadata").insert("resourceVersion".into(), rv.to_string().into());
        let stored = Stored::new(obj);
        self.inner.objects.insert(k.clone(), stored.clone());
        self.record(ChangeKind::Modified, &k, stored.clone(), Some(old));
        stored.value().clone()
    }

    /// Marks a stored object as being deleted: `deletionTimestamp` and
    /// `deletionGracePeriodSeconds` set as given (fields no update can write).
    pub fn mark_deleting(
        &mut self,
        res: &'static ResourceDef,
        ns: &str,
        name: &str,
        at: &str,
        grace_seconds: i64,
    ) -> Result<Value, ApiError> {
        let k = key(res, ns, name);
        let Some(old) = self.inner.objects.get(&k).cloned() else {
            return Err(ApiError::not_found(res, name));
        };
        let mut obj = old.value().clone();
        let md = meta::obj_mut(&mut obj, "metadata");
        md.insert("deletionTimestamp".into(), at.into());
        md.insert("deletionGracePeriodSeconds".into(), grace_seconds.into());
        Ok(self.write(k, old, obj))
    }

    /// What [`Self::update`] would store, with the same checks, storing nothing (a
    /// `dryRun=All` write): the resourceVersion stays the stored one.
    pub fn dry_update(&self, res: &'static ResourceDef, obj: Value) -> Result<Value, ApiError> {
        self.next_version(res, obj).map(|(_, _, obj)| obj)
    }

    /// The checks of an update and the object it would store (before its new
    /// resourceVersion), with the stored one.
    fn next_version(
        &self,
        res: &'static ResourceDef,
        mut obj: Value,
    ) -> Result<(Key, Arc<Stored>, Value), ApiError> {
        let ns = meta::namespace(&obj).to_string();
        let name = meta::name(&obj).to_string();
        let k = key(res, &ns, &name);
        let Some(old) = self.inner.objects.get(&k).cloned() else {
            return Err(ApiError::not_found(res, &name));
        };
        let old_rv = meta::path_str(&old, &["metadata", "resourceVersion"])
            .unwrap_or_default()
            .to_string();
        let given_rv = meta::path_str(&obj, &["metadata", "resourceVersion"]).unwrap_or_default();
        if !given_rv.is_empty() && given_rv != old_rv {
            return Err(ApiError::conflict(res, &name));
        }
        if let Some(m) = obj.as_object_mut() {
            m.insert("apiVersion".into(), res.api_version().into());
            m.insert("kind".into(), res.kind.into());
        }
        let md = meta::obj_mut(&mut obj, "metadata");
        for field in [
            "uid",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            match old["metadata"].get(field) {
                Some(v) => md.insert(field.into(), v.clone()),
                None => md.remove(field),
            };
        }
        if !res.namespaced {
            md.remove("namespace");
        }
        md.insert("resourceVersion".into(), old_rv.clone().into());
        if obj != *old.value() && res.has_generation && obj.get("spec") != old.get("spec") {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            meta::obj_mut(&mut obj, "metadata").insert("generation".into(), generation.into());
        }
        graceful::check_new_finalizers(res, &name, old.value(), &obj)?;
        Ok((k, old, obj))
    }

    /// Read-modify-write of one object; `Ok(None)` when it does not exist.
    pub fn modify(
        &mut self,
        res: &'static ResourceDef,
        ns: &str,
        name: &str,
        f: impl FnOnce(&mut Value),
    ) -> Result<Option<Value>, ApiError> {
        let Some(mut obj) = self.get(res, ns, name).cloned() else {
            return Ok(None);
        };
        f(&mut obj);
        self.update(res, obj).map(Some)
    }

    /// Removes an object at once (no graceful deletion); returns it as last stored,
    /// with the deletion's resourceVersion.
    pub fn delete(
        &mut self,
        res: &'static ResourceDef,
        ns: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let k = key(res, ns, name);
        let Some(old) = self.inner.objects.remove(&k) else {
            return Err(ApiError::not_found(res, name));
        };
        self.inner.rv += 1;
        let rv = self.inner.rv;
        let mut obj = old.value().clone();
        meta::obj_mut(&mut obj, "metadata").insert("resourceVersion".into(), rv.to_string().into());
        let stored = Stored::new(obj);
        self.record(ChangeKind::Deleted, &k, stored.clone(), Some(old));
        Ok(stored.value().clone())
    }

    /// The oldest resourceVersion a watch or list of `res` can still start from.
    pub fn oldest_rv_of(&self, res: &ResourceDef) -> u64 {
        self.inner
            .by_resource
            .get(res.id)
            .map_or(0, |w| w.compacted)
    }

    /// Changes of `res` after `rv`, or `Err(oldest kept)` when some were forgotten.
    pub fn changes_of_after(&self, res: &ResourceDef, rv: u64) -> Result<Vec<Arc<Change>>, u64> {
        let Some(w) = self.inner.by_resource.get(res.id) else {
            return Ok(Vec::new());
        };
        if rv < w.compacted {
            return Err(w.compacted + 1);
        }
        let start = w.changes.partition_point(|c| c.rv <= rv);
        Ok(w.changes.range(start..).cloned().collect())
    }

    /// Changes after `rv`, or `Err(oldest kept)` when some of them were forgotten.
    pub fn changes_after(&self, rv: u64) -> Result<Vec<Arc<Change>>, u64> {
        if rv < self.inner.compacted {
            return Err(self.inner.compacted + 1);
        }
        let start = self.inner.history.partition_point(|c| c.rv <= rv);
        Ok(self.inner.history.range(start..).cloned().collect())
    }

    /// Up to `limit` objects of `res` (in `ns`, or all namespaces) that pass `keep`, in
    /// key order after `after`, as they were at resourceVersion `at`: objects written
    /// since are taken back to their state then from the history. `Err(oldest kept)`
    /// when that history was forgotten. `next` is set while objects (matching or not)
    /// are left, as etcd's paging does.
    pub fn page(
        &self,
        res: &ResourceDef,
        ns: Option<&str>,
        after: Option<&ListKey>,
        at: u64,
        limit: usize,
        keep: impl Fn(&Value) -> bool,
    ) -> Result<Page, u64> {
        let at = at.min(self.inner.rv);
        let mut then: BTreeMap<ListKey, Option<Arc<Stored>>> = BTreeMap::new();
        if at < self.inner.rv {
            // A list at an older version is served from etcd, whose compaction is
            // global (watches use the per-resource windows of the watch cache).
            if at < self.inner.compacted {
                return Err(self.inner.compacted + 1);
            }
            let start = self.inner.history.partition_point(|c| c.rv <= at);
            for c in self.inner.history.range(start..) {
                let k = (c.res, c.ns.clone(), c.name.clone());
                if !in_list(res, ns, &k) {
                    continue;
                }
                let before = match c.kind {
                    ChangeKind::Added => None,
                    ChangeKind::Modified | ChangeKind::Deleted => c.previous.clone(),
                };
                then.entry((k.1, k.2)).or_insert(before);
            }
        }
        let lower = match after {
            Some((n, name)) => Bound::Excluded((res.id, n.clone(), name.clone())),
            None => Bound::Included(key(res, ns.unwrap_or(""), "")),
        };
        let mut now = self
            .inner
            .objects
            .range((lower, Bound::Unbounded))
            .take_while(|(k, _)| in_list(res, ns, k))
            .map(|((_, n, name), v)| ((n, name), v))
            .peekable();
        let then_lower = match after {
            Some(a) => Bound::Excluded(a.clone()),
            None => Bound::Unbounded,
        };
        let mut past = then
            .range((then_lower, Bound::Unbounded))
            .map(|((n, name), v)| ((n, name), v))
            .peekable();
        let mut items: Vec<Arc<Stored>> = Vec::new();
        let mut last: Option<ListKey> = None;
        let mut next = None;
        loop {
            // The next key in order; where the history knows it, its state at `at` wins.
            let candidate = match (now.peek(), past.peek()) {
                (None, None) => break,
                (Some(_), None) => now.next().map(|(k, v)| (k, Some(v))),
                (None, Some(_)) => past.next().map(|(k, v)| (k, v.as_ref())),
                (Some((a, _)), Some((b, _))) => match a.cmp(b) {
                    std::cmp::Ordering::Less => now.next().map(|(k, v)| (k, Some(v))),
                    std::cmp::Ordering::Greater => past.next().map(|(k, v)| (k, v.as_ref())),
                    std::cmp::Ordering::Equal => {
                        now.next();
                        past.next().map(|(k, v)| (k, v.as_ref()))
                    }
                },
            };
            let Some(((n, name), obj)) = candidate else {
                break;
            };
            let Some(obj) = obj else { continue };
            if items.len() >= limit {
                next = last.clone();
                break;
            }
            if keep(obj.value()) {
                items.push(obj.clone());
            }
            last = Some((n.clone(), name.clone()));
        }
        Ok(Page {
            items,
            rv: at,
            next,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::resources::{CONFIGMAPS, NODES};
    use serde_json::json;

    #[test]
    fn versions_conflicts_and_history() {
        let store = Store::new(16);
        let mut t = store.lock();
        let n = t
            .create(&NODES, json!({"metadata": {"name": "a"}}))
            .unwrap_or_default();
        let rv1 = n["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(t
            .create(&NODES, json!({"metadata": {"name": "a"}}))
            .is_err());
        let mut stale = n.clone();
        stale["spec"] = json!({"unschedulable": true});
        let upd = t.update(&NODES, stale.clone()).unwrap_or_default();
        assert_ne!(
            upd["metadata"]["resourceVersion"].as_str(),
            Some(rv1.as_str())
        );
        let err = t.update(&NODES, stale).err().map(|e| e.code);
        assert_eq!(err, Some(409));
        for i in 0..40 {
            let _ = t.create(
                &CONFIGMAPS,
                json!({"metadata": {"name": format!("c{i}"), "namespace": "x"}}),
            );
        }
        assert!(t.changes_after(1).is_err());
        assert_eq!(t.changes_after(t.current_rv()).map(|c| c.len()), Ok(0));
        assert_eq!(t.list(&CONFIGMAPS, Some("x")).len(), 40);
        assert_eq!(t.list(&CONFIGMAPS, Some("y")).len(), 0);
        assert_eq!(t.list(&NODES, None).len(), 1);
    }

    fn names(p: &Page) -> Vec<String> {
        p.items.iter().map(|o| meta::name(o).to_string()).collect()
    }

    #[test]
    fn pages_show_the_state_at_their_version() {
        let store = Store::new(100);
        let mut t = store.lock();
        for i in 0..5 {
            let cm = json!({"metadata": {"name": format!("c{i}"), "namespace": "x"}});
            assert!(t.create(&CONFIGMAPS, cm).is_ok());
        }
        let _ = t.create(
            &CONFIGMAPS,
            json!({"metadata": {"name": "other", "namespace": "y"}}),
        );
        let at = t.current_rv();
        let old_c1 = t.get(&CONFIGMAPS, "x", "c1").cloned().unwrap_or_default();
        let _ = t.modify(&CONFIGMAPS, "x", "c1", |o| o["data"] = json!({"k": "v"}));
        let _ = t.delete(&CONFIGMAPS, "x", "c2");
        let _ = t.create(
            &CONFIGMAPS,
            json!({"metadata": {"name": "c9", "namespace": "x"}}),
        );
        let all = |_: &Value| true;
        let p1 = t.page(&CONFIGMAPS, Some("x"), None, at, 2, all);
        let p1 = p1.unwrap_or_else(|_| panic!("kept"));
        assert_eq!(names(&p1), ["c0", "c1"]);
        assert_eq!(*p1.items[1].value(), old_c1);
        assert_eq!(p1.next, Some(("x".to_string(), "c1".to_string())));
        let p2 = t.page(&CONFIGMAPS, Some("x"), p1.next.as_ref(), at, 2, all);
        let p2 = p2.unwrap_or_else(|_| panic!("kept"));
        assert_eq!(names(&p2), ["c2", "c3"]);
        let p3 = t.page(&CONFIGMAPS, Some("x"), p2.next.as_ref(), at, 2, all);
        let p3 = p3.unwrap_or_else(|_| panic!("kept"));
        assert_eq!((names(&p3), p3.next), (vec!["c4".to_string()], None));
        let now = t.page(&CONFIGMAPS, None, None, t.current_rv(), 100, all);
        let now = now.unwrap_or_else(|_| panic!("current"));
        assert_eq!(names(&now), ["c0", "c1", "c3", "c4", "c9", "other"]);
        let some = t.page(&CONFIGMAPS, None, None, at, 100, |o| meta::name(o) != "c0");
        assert_eq!(some.map(|p| p.items.len()).ok(), Some(5));
        for i in 0..200 {
            let _ = t.create(
                &CONFIGMAPS,
                json!({"metadata": {"name": format!("z{i}"), "namespace": "z"}}),
            );
        }
        assert!(t.page(&CONFIGMAPS, None, None, at, 10, all).is_err());
    }

    #[test]
    fn bulk_creation_forgets_history() {
        let store = Store::new(100);
        let mut t = store.lock();
        let before = t.current_rv();
        let nodes = (0..50).map(|i| json!({"metadata": {"name": format!("n{i}")}}));
        assert_eq!(t.bulk_create(&NODES, nodes).ok(), Some(50));
        assert_eq!(t.list(&NODES, None).len(), 50);
        assert_eq!(t.current_rv(), before + 50);
        assert!(t.changes_after(before).is_err());
        assert_eq!(t.changes_after(t.current_rv()).map(|c| c.len()), Ok(0));
        assert!(t.changes_of_after(&NODES, before).is_err());
    }

    /// A burst of writes to one resource (pods) used to push every other resource's
    /// changes out of the one shared window, so node watches got 410 Expired.
    #[test]
    fn a_burst_of_one_resource_keeps_the_window_of_another() {
        let store = Store::new(16);
        let mut t = store.lock();
        let _ = t.create(&NODES, json!({"metadata": {"name": "a"}}));
        let node_rv = t.current_rv();
        let _ = t.modify(&NODES, "", "a", |n| {
            n["spec"] = json!({"unschedulable": true})
        });
        for i in 0..100 {
            let _ = t.create(
                &CONFIGMAPS,
                json!({"metadata": {"name": format!("c{i}"), "namespace": "x"}}),
            );
        }
        assert!(t.changes_after(node_rv).is_err());
        let nodes = t.changes_of_after(&NODES, node_rv).unwrap_or_default();
        assert_eq!(nodes.len(), 1);
        assert!(t.oldest_rv_of(&NODES) <= node_rv);
        assert!(t.changes_of_after(&CONFIGMAPS, node_rv).is_err());
    }
}
