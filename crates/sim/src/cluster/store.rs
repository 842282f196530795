//! The object store: every object as JSON, one global `resourceVersion` counter bumped on
//! every write, and a bounded history of changes that watches replay from.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::watch;

use super::meta::{self, IdGen};
use super::resources::ResourceDef;
use super::status::ApiError;

/// (qualified resource id, namespace or "", name)
type Key = (&'static str, String, String);

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

/// One write, kept for watches. `previous` lets a filtered watch turn a modification
/// into ADDED/DELETED when an object starts or stops matching its selector.
#[derive(Debug)]
pub struct Change {
    pub rv: u64,
    pub res: &'static str,
    pub ns: String,
    pub kind: ChangeKind,
    pub object: Value,
    pub previous: Option<Value>,
}

#[derive(Debug)]
struct Inner {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Arc<Change>>,
    capacity: usize,
    /// Highest resourceVersion whose change was dropped from `history`.
    compacted: u64,
    ids: IdGen,
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

impl Txn<'_> {
    pub fn current_rv(&self) -> u64 {
        self.inner.rv
    }

    pub fn new_uid(&mut self) -> String {
        self.inner.ids.uid()
    }

    pub fn new_suffix(&mut self) -> String {
        self.inner.ids.suffix(5)
    }

    pub fn get(&self, res: &ResourceDef, ns: &str, name: &str) -> Option<&Value> {
        self.inner.objects.get(&key(res, ns, name))
    }

    /// Objects of `res`, in one namespace or all, ordered by namespace then name.
    pub fn list(&self, res: &ResourceDef, ns: Option<&str>) -> Vec<&Value> {
        let start = key(res, ns.unwrap_or(""), "");
        self.inner
            .objects
            .range(start..)
            .take_while(|((r, n, _), _)| {
                *r == res.id && ns.is_none_or(|want| !res.namespaced || n == want)
            })
            .map(|(_, v)| v)
            .collect()
    }

    /// Cloned objects, handy when the caller goes on to write.
    pub fn list_owned(&self, res: &ResourceDef, ns: Option<&str>) -> Vec<Value> {
        self.list(res, ns).into_iter().cloned().collect()
    }

    fn record(
        &mut self,
        res: &'static str,
        ns: &str,
        kind: ChangeKind,
        object: Value,
        previous: Option<Value>,
    ) {
        let rv = self.inner.rv;
        let change = Arc::new(Change {
            rv,
            res,
            ns: ns.to_string(),
            kind,
            object,
            previous,
        });
        self.inner.history.push_back(change);
        while self.inner.history.len() > self.inner.capacity {
            if let Some(old) = self.inner.history.pop_front() {
                self.inner.compacted = old.rv;
            }
        }
        self.dirty = true;
    }

    /// Stores a new object. Sets uid, resourceVersion, generation, and a
    /// creationTimestamp unless the caller supplied one (the HTTP layer never does).
    pub fn create(&mut self, res: &'static ResourceDef, mut obj: Value) -> Result<Value, ApiError> {
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
        self.inner.rv += 1;
        let rv = self.inner.rv;
        let uid = self.new_uid();
        let obj_map = obj
            .as_object_mut()
            .ok_or_else(|| ApiError::bad_request("object expected"))?;
        obj_map.insert("apiVersion".into(), res.api_version().into());
        obj_map.insert("kind".into(), res.kind.into());
        let md = meta::obj_mut(&mut obj, "metadata");
        md.insert("name".into(), name.clone().into());
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
        self.inner.objects.insert(k, obj.clone());
        self.record(res.id, &ns, ChangeKind::Added, obj.clone(), None);
        Ok(obj)
    }

    /// Replaces an object. A non-empty `metadata.resourceVersion` must match the stored
    /// one (optimistic concurrency). Identity fields are kept; an unchanged object is
    /// not written, so watches stay quiet.
    pub fn update(&mut self, res: &'static ResourceDef, mut obj: Value) -> Result<Value, ApiError> {
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
        if obj == old {
            return Ok(old);
        }
        if res.has_generation && obj.get("spec") != old.get("spec") {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            meta::obj_mut(&mut obj, "metadata").insert("generation".into(), generation.into());
        }
        self.inner.rv += 1;
        let rv = self.inner.rv;
        meta::obj_mut(&mut obj, "metadata").insert("resourceVersion".into(), rv.to_string().into());
        self.inner.objects.insert(k, obj.clone());
        self.record(res.id, &ns, ChangeKind::Modified, obj.clone(), Some(old));
        Ok(obj)
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
        let Some(mut obj) = self.inner.objects.remove(&k) else {
            return Err(ApiError::not_found(res, name));
        };
        self.inner.rv += 1;
        let rv = self.inner.rv;
        meta::obj_mut(&mut obj, "metadata").insert("resourceVersion".into(), rv.to_string().into());
        let ns = if res.namespaced { ns } else { "" };
        self.record(res.id, ns, ChangeKind::Deleted, obj.clone(), None);
        Ok(obj)
    }

    /// Changes after `rv`, or `Err(oldest kept)` when some of them were forgotten.
    pub fn changes_after(&self, rv: u64) -> Result<Vec<Arc<Change>>, u64> {
        if rv < self.inner.compacted {
            return Err(self.inner.compacted + 1);
        }
        let start = self.inner.history.partition_point(|c| c.rv <= rv);
        Ok(self.inner.history.range(start..).cloned().collect())
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
}
