//! Storage as k3s ships it (the field checks of PersistentVolumes, PersistentVolumeClaims,
//! StorageClasses and CSINodes are in `resources::normalize`): the
//! DefaultStorageClass admission plugin, and a `local-path` provisioner: when the
//! scheduler places a pod whose claim is unbound and of a `rancher.io/local-path` class,
//! it notes the node on the claim (`volume.kubernetes.io/selected-node`), makes a
//! hostPath PV that only that node can reach, and binds the two.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use serde::Deserialize;
use serde_json::{json, Value};

use super::meta;
use super::resources::{PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES, STORAGECLASSES};
use super::status::ApiError;
use super::store::Txn;
use crate::model::{
    volumes::DEFAULT_CLASS, volumes::HOSTNAME_LABEL, volumes::SELECTED_NODE, ClaimInfo, ClassInfo,
    CsiNodeInfo, PodInfo, PvInfo, Volumes,
};
use nodewright_core::cluster::convert::{claim_info, class_info, csi_node_info, pv_info};

/// The provisioner k3s's default StorageClass names.
pub const LOCAL_PATH_PROVISIONER: &str = "rancher.io/local-path";
/// Where k3s's local-path provisioner keeps volumes on the node.
const LOCAL_PATH_DIR: &str = "/var/lib/rancher/k3s/storage";

/// The DefaultStorageClass admission plugin: a claim that names no class gets the
/// default one, if there is one.
pub fn admit_claim(txn: &Txn<'_>, claim: &mut Value) {
    if claim
        .pointer("/spec/storageClassName")
        .is_some_and(|c| !c.is_null())
    {
        return;
    }
    let default = txn
        .list(&STORAGECLASSES, None)
        .into_iter()
        .filter(|c| meta::path_str(c, &["metadata", "annotations", DEFAULT_CLASS]) == Some("true"))
        .filter_map(|c| meta::path_str(c, &["metadata", "name"]).map(str::to_string))
        .max();
    if let (Some(name), Some(spec)) = (
        default,
        claim.get_mut("spec").and_then(Value::as_object_mut),
    ) {
        spec.insert("storageClassName".into(), json!(name));
    }
}

/// k3s's default StorageClass.
pub fn local_path_class() -> Value {
    json!({
        "metadata": {"name": "local-path", "annotations": {DEFAULT_CLASS: "true"}},
        "provisioner": LOCAL_PATH_PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    })
}

fn typed<T: for<'de> Deserialize<'de>, R>(v: &Value, f: fn(&T) -> Option<R>) -> Option<R> {
    T::deserialize(v).ok().as_ref().and_then(f)
}

/// Every volume object, as the planner reads them.
pub fn volumes(txn: &Txn<'_>) -> Volumes {
    use super::resources::CSINODES;
    Volumes {
        pvs: txn
            .list(&PERSISTENTVOLUMES, None)
            .into_iter()
            .filter_map(|v| typed::<PersistentVolume, PvInfo>(v, pv_info))
            .collect(),
        claims: txn
            .list(&PERSISTENTVOLUMECLAIMS, None)
            .into_iter()
            .filter_map(|v| typed::<PersistentVolumeClaim, ClaimInfo>(v, claim_info))
            .collect(),
        classes: txn
            .list(&STORAGECLASSES, None)
            .into_iter()
            .filter_map(|v| typed::<StorageClass, ClassInfo>(v, class_info))
            .collect(),
        csi_nodes: txn
            .list(&CSINODES, None)
            .into_iter()
            .filter_map(|v| typed::<CSINode, CsiNodeInfo>(v, csi_node_info))
            .collect(),
    }
}

/// The claims of `pod` that wait for a provisioner, with their class: unbound, of a
/// WaitForFirstConsumer class.
pub fn unbound_claims<'v>(vols: &'v Volumes, pod: &PodInfo) -> Vec<(&'v ClaimInfo, &'v ClassInfo)> {
    let default = vols
        .classes
        .iter()
        .filter(|c| c.default)
        .map(|c| &c.name)
        .max();
    pod.claims
        .iter()
        .filter_map(|pc| {
            let claim = vols
                .claims
                .iter()
                .find(|c| c.namespace == pod.namespace && c.name == pc.claim)?;
            if claim.volume_name.is_some() {
                return None;
            }
            let class_name = claim.storage_class.as_ref().or(default)?;
            let class = vols.classes.iter().find(|c| &c.name == class_name)?;
            class.wait_for_first_consumer.then_some((claim, class))
        })
        .collect()
}

/// What the scheduler, the provisioner and the PV controller do for a claim of a pod
/// placed on `node` (its `hostname` label): the claim gets the selected-node annotation;
/// a `local-path` class's claim gets a hostPath PV only that node reaches, bound to it.
/// Other provisioners are not simulated: their claims keep waiting (the pod with them).
pub fn provision(
    txn: &mut Txn<'_>,
    claim: &ClaimInfo,
    class: &ClassInfo,
    node: &str,
    hostname: &str,
) -> Result<bool, ApiError> {
    let (ns, name) = (claim.namespace.as_str(), claim.name.as_str());
    let Some(pvc) = txn.get(&PERSISTENTVOLUMECLAIMS, ns, name).cloned() else {
        return Ok(false);
    };
    txn.modify(&PERSISTENTVOLUMECLAIMS, ns, name, |c| {
        meta::obj_mut(c, "metadata");
        let md = &mut c["metadata"];
        if md.get("annotations").is_none_or(|a| !a.is_object()) {
            md["annotations"] = json!({});
        }
        md["annotations"][SELECTED_NODE] = json!(node);
    })?;
    if class.provisioner != LOCAL_PATH_PROVISIONER {
        return Ok(false);
    }
    let uid = meta::path_str(&pvc, &["metadata", "uid"]).unwrap_or(name);
    let pv_name = format!("pvc-{uid}");
    let storage = pvc
        .pointer("/spec/resources/requests/storage")
        .cloned()
        .unwrap_or_else(|| json!("1Gi"));
    let modes = pvc
        .pointer("/spec/accessModes")
        .cloned()
        .unwrap_or_else(|| json!(["ReadWriteOnce"]));
    let pv = json!({
        "metadata": {"name": pv_name, "annotations": {
            "pv.kubernetes.io/provisioned-by": LOCAL_PATH_PROVISIONER,
            "local.path.provisioner/selected-node": node}},
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": modes,
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": class.name,
            "volumeMode": "Filesystem",
            "hostPath": {"path": format!("{LOCAL_PATH_DIR}/{pv_name}_{ns}_{name}"), "type": "DirectoryOrCreate"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": HOSTNAME_LABEL, "operator": "In", "values": [hostname]}]}]}},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "namespace": ns, "name": name, "uid": uid,
                "resourceVersion": meta::path_str(&pvc, &["metadata", "resourceVersion"]).unwrap_or_default()},
        },
        "status": {"phase": "Bound"},
    });
    txn.create(&PERSISTENTVOLUMES, pv)?;
    txn.modify(&PERSISTENTVOLUMECLAIMS, ns, name, |c| {
        c["spec"]["volumeName"] = json!(pv_name);
        c["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = json!("yes");
        c["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] = json!("yes");
        c["status"] =
            json!({"phase": "Bound", "accessModes": modes, "capacity": {"storage": storage}});
    })?;
    Ok(true)
}
