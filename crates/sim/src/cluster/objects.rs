//! Building the objects the simulator creates itself (nodes, pods from templates) and
//! the defaults the real API server fills into created pods.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

use super::meta;

/// A node added directly (control plane or unmanaged workers), not booted from a VM.
#[derive(Debug, Clone)]
pub struct SimNodeSpec {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// Capacity in bytes; allocatable is this minus the options' reserve.
    pub memory: u64,
    pub cpus: u32,
    pub unschedulable: bool,
    /// Ready condition True (and its kubelet runs pods) or False.
    pub ready: bool,
    /// Images already present on the node (`status.images` lists the largest 50).
    pub images: Vec<String>,
    /// creationTimestamp; now when None.
    pub created: Option<Timestamp>,
    /// Extended resources it advertises (`nvidia.com/gpu` → `1`).
    pub extended: BTreeMap<String, String>,
}

impl SimNodeSpec {
    pub fn new(name: impl Into<String>, memory: u64) -> Self {
        SimNodeSpec {
            name: name.into(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            memory,
            cpus: 2,
            unschedulable: false,
            ready: true,
            images: Vec::new(),
            created: None,
            extended: BTreeMap::new(),
        }
    }

    pub fn label(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }

    /// Advertises an extended resource (`nvidia.com/gpu`, `1`).
    pub fn extended(mut self, name: impl Into<String>, quantity: impl Into<String>) -> Self {
        self.extended.insert(name.into(), quantity.into());
        self
    }

    pub fn taint(mut self, key: &str, value: Option<&str>, effect: &str) -> Self {
        self.taints.push(Taint {
            key: key.to_string(),
            value: value.map(str::to_string),
            effect: effect.to_string(),
            time_added: None,
        });
        self
    }
}

impl Default for SimNodeSpec {
    fn default() -> Self {
        SimNodeSpec::new("node", 4 << 30)
    }
}

/// What a simulated pod looks like: enough of a PodTemplate for scheduling tests.
#[derive(Debug, Clone, Default)]
pub struct SimPodTemplate {
    pub image: String,
    /// Memory request in bytes (0 = none).
    pub memory: u64,
    /// CPU request in millicores (0 = none).
    pub cpu_millis: u32,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
    /// Always (default), OnFailure or Never.
    pub restart_policy: Option<String>,
    pub priority_class_name: Option<String>,
    /// Binds the pod directly, bypassing the scheduler.
    pub node_name: Option<String>,
    /// Further requests by resource name (`nvidia.com/gpu` → `1`, `ephemeral-storage`).
    pub requests: BTreeMap<String, String>,
    /// Further pod spec fields (`affinity`, `topologySpreadConstraints`, ...).
    pub spec: serde_json::Map<String, Value>,
    /// Volumes backed by PersistentVolumeClaims, as (volume name, claim name), mounted
    /// at `/data/<volume>`.
    pub claims: Vec<(String, String)>,
}

impl SimPodTemplate {
    pub fn new(image: impl Into<String>, memory: u64) -> Self {
        SimPodTemplate {
            image: image.into(),
            memory,
            ..Default::default()
        }
    }

    pub fn label(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }

    pub fn annotation(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.annotations.insert(k.into(), v.into());
        self
    }

    pub fn node_selector(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.node_selector.insert(k.into(), v.into());
        self
    }

    /// Tolerates `key` (any value) with `effect` ("" = every effect).
    pub fn tolerate(mut self, key: &str, effect: &str) -> Self {
        self.tolerations.push(Toleration {
            key: Some(key.to_string()),
            operator: Some("Exists".into()),
            effect: (!effect.is_empty()).then(|| effect.to_string()),
            ..Default::default()
        });
        self
    }

    /// Requests `millis` millicores of CPU.
    pub fn cpu(mut self, millis: u32) -> Self {
        self.cpu_millis = millis;
        self
    }

    /// Requests `quantity` of resource `name` (extended resources, ephemeral storage).
    pub fn request(mut self, name: impl Into<String>, quantity: impl Into<String>) -> Self {
        self.requests.insert(name.into(), quantity.into());
        self
    }

    /// Sets a pod spec field as given (`affinity`, `topologySpreadConstraints`, ...).
    pub fn spec_field(mut self, key: impl Into<String>, value: Value) -> Self {
        self.spec.insert(key.into(), value);
        self
    }

    /// Mounts PersistentVolumeClaim `claim` (in the pod's namespace) as volume `volume`.
    pub fn claim(mut self, volume: impl Into<String>, claim: impl Into<String>) -> Self {
        self.claims.push((volume.into(), claim.into()));
        self
    }

    pub fn restart_policy(mut self, policy: &str) -> Self {
        self.restart_policy = Some(policy.into());
        self
    }

    /// `{metadata, spec}` of a PodTemplateSpec.
    pub fn to_template(&self) -> Value {
        let mut requests = serde_json::Map::new();
        if self.memory > 0 {
            requests.insert("memory".into(), self.memory.to_string().into());
        }
        if self.cpu_millis > 0 {
            requests.insert("cpu".into(), format!("{}m", self.cpu_millis).into());
        }
        for (name, q) in &self.requests {
            requests.insert(name.clone(), q.clone().into());
        }
        let mut container = json!({"name": "main", "image": self.image});
        if !requests.is_empty() {
            container["resources"] = json!({"requests": requests});
        }
        if !self.claims.is_empty() {
            let mounts: Vec<Value> = self
                .claims
                .iter()
                .map(|(v, _)| json!({"name": v, "mountPath": format!("/data/{v}")}))
                .collect();
            container["volumeMounts"] = json!(mounts);
        }
        let mut spec = json!({"containers": [container]});
        if !self.claims.is_empty() {
            let volumes: Vec<Value> = self
                .claims
                .iter()
                .map(|(v, c)| json!({"name": v, "persistentVolumeClaim": {"claimName": c}}))
                .collect();
            spec["volumes"] = json!(volumes);
        }
        if !self.node_selector.is_empty() {
            spec["nodeSelector"] = json!(self.node_selector);
        }
        if !self.tolerations.is_empty() {
            spec["tolerations"] = serde_json::to_value(&self.tolerations).unwrap_or_default();
        }
        if let Some(p) = &self.restart_policy {
            spec["restartPolicy"] = json!(p);
        }
        if let Some(p) = &self.priority_class_name {
            spec["priorityClassName"] = json!(p);
        }
        if let Some(n) = &self.node_name {
            spec["nodeName"] = json!(n);
        }
        for (k, v) in &self.spec {
            spec[k.as_str()] = v.clone();
        }
        let mut md = json!({});
        if !self.labels.is_empty() {
            md["labels"] = json!(self.labels);
        }
        if !self.annotations.is_empty() {
            md["annotations"] = json!(self.annotations);
        }
        json!({"metadata": md, "spec": spec})
    }
}

/// Everything a kubelet reports about a node, built at registration.
pub struct NodeBuild<'a> {
    pub name: &'a str,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Value>,
    pub memory: u64,
    pub reserve: u64,
    pub cpus: u32,
    pub unschedulable: bool,
    pub ready: bool,
    pub images: &'a [String],
    pub created: Option<Timestamp>,
    pub kubelet_version: &'a str,
    pub address: String,
    pub provider_id: Option<String>,
    /// Extended resources (`nvidia.com/gpu` → `1`), in capacity and allocatable.
    pub extended: BTreeMap<String, String>,
}

pub fn node_object(b: NodeBuild<'_>) -> Value {
    let mut labels = b.labels;
    labels
        .entry("kubernetes.io/hostname".into())
        .or_insert_with(|| b.name.to_string());
    labels
        .entry("kubernetes.io/os".into())
        .or_insert_with(|| "linux".into());
    labels
        .entry("kubernetes.io/arch".into())
        .or_insert_with(|| "amd64".into());
    labels
        .entry("beta.kubernetes.io/os".into())
        .or_insert_with(|| "linux".into());
    labels
        .entry("beta.kubernetes.io/arch".into())
        .or_insert_with(|| "amd64".into());
    let now = meta::now_rfc3339();
    let cond = |t: &str, s: &str, reason: &str, msg: &str| {
        json!({"type": t, "status": s, "reason": reason, "message": msg,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let ready = if b.ready {
        cond(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        )
    } else {
        cond(
            "Ready",
            "False",
            "KubeletNotReady",
            "container runtime status check may not have completed yet",
        )
    };
    let allocatable_mem = b.memory.saturating_sub(b.reserve);
    let mut node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": b.name,
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {},
        "status": {
            "capacity": {"cpu": b.cpus.to_string(), "memory": meta::format_memory(b.memory),
                         "pods": "110", "ephemeral-storage": "20Gi", "hugepages-2Mi": "0"},
            "allocatable": {"cpu": b.cpus.to_string(), "memory": meta::format_memory(allocatable_mem),
                            "pods": "110", "ephemeral-storage": "20Gi", "hugepages-2Mi": "0"},
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                ready,
            ],
            "addresses": [{"type": "InternalIP", "address": b.address}, {"type": "Hostname", "address": b.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": "", "systemUUID": "", "bootID": "",
                "kernelVersion": "6.1.0-sim", "osImage": "nodewright simulated Linux",
                "containerRuntimeVersion": "containerd://1.7.24",
                "kubeletVersion": b.kubelet_version, "kubeProxyVersion": b.kubelet_version,
                "operatingSystem": "linux", "architecture": "amd64",
            },
            "images": super::registry::listing(b.images),
        },
    });
    if !b.taints.is_empty() {
        node["spec"]["taints"] = Value::Array(b.taints);
    }
    if b.unschedulable {
        node["spec"]["unschedulable"] = json!(true);
    }
    if let Some(p) = b.provider_id {
        node["spec"]["providerID"] = json!(p);
    }
    if let Some(t) = b.created {
        node["metadata"]["creationTimestamp"] = json!(meta::rfc3339(t));
    }
    set_extended(&mut node, &b.extended);
    node
}

/// Advertises extended resources in a node's capacity and allocatable (what a device
/// plugin does through its kubelet).
pub fn set_extended(node: &mut Value, extended: &BTreeMap<String, String>) {
    if extended.is_empty() {
        return;
    }
    for field in ["capacity", "allocatable"] {
        let list = meta::obj_mut(&mut node["status"], field);
        for (name, q) in extended {
            list.insert(name.clone(), json!(q));
        }
    }
}

/// One `status.images` entry; sizes are made up but stable per name.
pub fn image_entry(name: &str) -> Value {
    let size = 10_000_000 + (name.bytes().map(u64::from).sum::<u64>() % 200) * 1_000_000;
    json!({"names": [name], "sizeBytes": size})
}

fn qos_class(pod: &Value) -> &'static str {
    let containers = meta::path(pod, &["spec", "containers"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in &containers {
        let req = c
            .get("resources")
            .and_then(|r| r.get("requests"))
            .cloned()
            .unwrap_or(Value::Null);
        let lim = c
            .get("resources")
            .and_then(|r| r.get("limits"))
            .cloned()
            .unwrap_or(Value::Null);
        if req.as_object().is_some_and(|m| !m.is_empty())
            || lim.as_object().is_some_and(|m| !m.is_empty())
        {
            any = true;
        }
        for r in ["cpu", "memory"] {
            let l = lim
                .get(r)
                .and_then(Value::as_str)
                .and_then(meta::parse_quantity_milli);
            let q = req
                .get(r)
                .and_then(Value::as_str)
                .and_then(meta::parse_quantity_milli)
                .or(l);
            if l.is_none() || l != q {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// Copies each limit without a request into `requests`, as the API server's defaulting
/// does for containers.
fn default_requests(container: &mut Value) {
    let Some(limits) = meta::path(container, &["resources", "limits"])
        .and_then(Value::as_object)
        .cloned()
    else {
        return;
    };
    let Some(resources) = container
        .get_mut("resources")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let requests = resources.entry("requests").or_insert_with(|| json!({}));
    if let Some(requests) = requests.as_object_mut() {
        for (name, q) in limits {
            requests.entry(name).or_insert(q);
        }
    }
}

/// Fills the defaults the API server (and its admission plugins) set on new pods.
pub fn default_pod(pod: &mut Value) {
    let spec = meta::obj_mut(pod, "spec");
    spec.entry("restartPolicy")
        .or_insert_with(|| json!("Always"));
    spec.entry("schedulerName")
        .or_insert_with(|| json!("default-scheduler"));
    spec.entry("dnsPolicy")
        .or_insert_with(|| json!("ClusterFirst"));
    spec.entry("terminationGracePeriodSeconds")
        .or_insert_with(|| json!(30));
    spec.entry("securityContext").or_insert_with(|| json!({}));
    spec.entry("enableServiceLinks")
        .or_insert_with(|| json!(true));
    spec.entry("preemptionPolicy")
        .or_insert_with(|| json!("PreemptLowerPriority"));
    spec.entry("priority").or_insert_with(|| json!(0));
    // A resource with a limit but no request is requested at its limit.
    for field in ["initContainers", "containers"] {
        if let Some(Value::Array(cs)) = spec.get_mut(field) {
            for c in cs.iter_mut() {
                default_requests(c);
            }
        }
    }
    if let Some(Value::Array(cs)) = spec.get_mut("containers") {
        for c in cs.iter_mut() {
            if let Some(m) = c.as_object_mut() {
                let latest = m.get("image").and_then(Value::as_str).is_some_and(|i| {
                    i.ends_with(":latest") || !i.rsplit('/').next().unwrap_or(i).contains(':')
                });
                m.entry("imagePullPolicy")
                    .or_insert_with(|| json!(if latest { "Always" } else { "IfNotPresent" }));
                m.entry("terminationMessagePath")
                    .or_insert_with(|| json!("/dev/termination-log"));
                m.entry("terminationMessagePolicy")
                    .or_insert_with(|| json!("File"));
                m.entry("resources").or_insert_with(|| json!({}));
            }
        }
    }
    // The DefaultTolerationSeconds admission plugin.
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Value::Array(ts) = tolerations {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            let present = ts.iter().any(|t| {
                t.get("key").and_then(Value::as_str) == Some(key)
                    || (t.get("key").is_none()
                        && t.get("operator").and_then(Value::as_str) == Some("Exists"))
            });
            if !present {
                ts.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
    let qos = qos_class(pod);
    let status = meta::obj_mut(pod, "status");
    status.entry("phase").or_insert_with(|| json!("Pending"));
    status.insert("qosClass".into(), json!(qos));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_defaults() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "a", "image": "nginx:1", "resources": {"requests": {"memory": "128Mi", "cpu": "100m"}}},
            {"name": "b", "image": "busybox", "resources": {"limits": {"memory": "64Mi"}}}]}});
        default_pod(&mut pod);
        // A limit without a request becomes the request.
        assert_eq!(
            pod["spec"]["containers"][1]["resources"]["requests"]["memory"],
            "64Mi"
        );
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "100m"
        );
        assert_eq!(pod["status"]["phase"], "Pending");
        assert_eq!(pod["status"]["qosClass"], "Burstable");
        assert_eq!(pod["spec"]["containers"][1]["imagePullPolicy"], "Always");
        assert_eq!(pod["spec"]["tolerations"].as_array().map(Vec::len), Some(2));
    }
}
