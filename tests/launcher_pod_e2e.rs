//! The launcher pod of VMIs with Multus networks, SR-IOV, hook sidecars and virtiofs, created by
//! the running controller on both API servers (issue 39, items 2 and 3).
//!
//! - A hook sidecar's ConfigMap is read while rendering (template.go:583-587): while it is
//!   missing the VMI gets `Synchronized=False` `FailedCreate` "failed to render launch manifest:
//!   configmaps \"NAME\" not found" and no pod (lifecycle.go:161-162 records no event for a
//!   render error other than a missing PVC); once it exists, a retry (the sync error requeues
//!   with backoff) creates the pod with the ConfigMap volume.
//! - tests/fixtures/vmi-networks-hooks-virtiofs.yaml gets the pod KubeVirt renders: the Multus
//!   annotation with hashed interface names, `virtiofs-shared-files` then `hook-sidecar-0`, the
//!   network-info, hook-sockets and virtiofs volumes, the hook's ConfigMap volume last — the
//!   pure renderer's golden (tests/golden/render/) checked field by field on the created pod.
//! - With `ExternalNetResourceInjection` disabled, an SR-IOV network's NAD is read while
//!   rendering: missing, `FailedCreate` and no pod; present, its `resourceName` is requested.
//! - A binding plugin registered in the live KubeVirt CR adds its sidecar and its memory.
//! - `supportContainerResources` in the live KubeVirt CR sizes the sidecar, console-log and
//!   container-disk containers of pods created after it (renderresources.go:535-625).
//! - The CR's image pull policy, launcher verbosity and VMI seccomp profile reach pods created
//!   after it (template.go:525-547, 700-715, 963).
//! - The CR's `HypervStrictCheck` gate adds the Hyper-V node labels; its
//!   `permittedHostDevices` refuses a VMI's unlisted GPU: `FailedCreate`, no pod.
//! - A LUN with a persistent reservation labels the pod with its claim's UID and keeps it off
//!   nodes running another pod with that label (template.go:164-193).

use crate::common;

use common::env::{Env, Server};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use virtctl_rs::api::manifest::KubeVirtObject;
use virtctl_rs::api::quantity::ParsedQuantity;
use virtctl_rs::api::vmi::VirtualMachineInstance;
use virtctl_rs::config::ClusterSettings;
use virtctl_rs::launcher::explain::explain;

const FAILED_RENDER: &str = "failed to render launch manifest: ";

/// The ConfigMaps the fixture VMI's hook sidecar and shared files read.
async fn create_fixture_config_maps(env: &Env) {
    create_config_map(env, "fixture-hook-script", "hook.sh", "#!/bin/sh\nexit 0\n").await;
    create_config_map(env, "fixture-shared-files", "motd", "hello\n").await;
}

async fn create_config_map(env: &Env, name: &str, key: &str, value: &str) {
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name}, "data": {key: value}});
    api.create(&PostParams::default(), &serde_json::from_value(cm).unwrap())
        .await
        .expect("create the ConfigMap");
}

fn fixture_vmi(namespace: &str) -> VirtualMachineInstance {
    let path = common::repo_path("tests/fixtures/vmi-networks-hooks-virtiofs.yaml");
    let text = std::fs::read_to_string(&path).expect("read the fixture");
    let mut vmi: VirtualMachineInstance = serde_yaml::from_str(&text).expect("a VMI");
    vmi.metadata.namespace = Some(namespace.to_string());
    vmi
}

async fn the_pod(env: &Env, vmi: &str) -> Pod {
    env.wait_for(&format!("the launcher pod of {vmi}"), || async {
        let uid = env.vmi_uid(vmi).await?;
        env.launcher_pods(&uid).await.into_iter().next()
    })
    .await
}

fn names<T>(list: Option<&Vec<T>>, name: impl Fn(&T) -> &str) -> Vec<String> {
    list.into_iter()
        .flatten()
        .map(|x| name(x).to_string())
        .collect()
}

async fn a_hook_sidecar_configmap_is_read_while_rendering(server: Server) {
    let env = Env::start_on(server).await;
    let mut vmi = fixture_vmi(&env.namespace);
    vmi.metadata.name = Some("hook-cm".into());
    env.vmis()
        .create(&PostParams::default(), &vmi)
        .await
        .expect("create the VMI");
    let expected = format!("{FAILED_RENDER}configmaps \"fixture-hook-script\" not found");
    env.wait_vmi_condition("hook-cm", "Synchronized=False FailedCreate", |c| {
        c.type_ == "Synchronized"
            && c.status == "False"
            && c.reason.as_deref() == Some("FailedCreate")
            && c.message.as_deref() == Some(expected.as_str())
    })
    .await;
    let uid = env.vmi_uid("hook-cm").await.unwrap();
    assert!(
        env.launcher_pods(&uid).await.is_empty(),
        "no pod without the ConfigMap"
    );

    // Once the ConfigMaps exist, a retry renders the pod with the hook's volume.
    create_fixture_config_maps(&env).await;
    let pod = the_pod(&env, "hook-cm").await;
    let spec = pod.spec.expect("pod spec");
    let hook = spec.volumes.iter().flatten().last().expect("volumes");
    assert_eq!(hook.name, "fixture-hook-script");
    assert_eq!(
        hook.config_map.as_ref().and_then(|c| c.default_mode),
        Some(0o755)
    );
    env.shutdown().await;
}

async fn a_vmi_with_networks_hooks_and_virtiofs_gets_kubevirts_pod(server: Server) {
    let env = Env::start_on(server).await;
    let ns = env.namespace.clone();
    create_fixture_config_maps(&env).await;
    env.vmis()
        .create(&PostParams::default(), &fixture_vmi(&ns))
        .await
        .expect("create the VMI");
    let pod = the_pod(&env, "fixture-netvirtiofs").await;
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    // multus/annotation.go: interface order, hashed names (SHA-256 of the network name), the
    // VMI's namespace for a bare NAD name, the MAC request.
    assert_eq!(
        annotations["k8s.v1.cni.cncf.io/networks"],
        format!(
            r#"[{{"name":"backend-bridge","namespace":"{ns}","mac":"02:00:00:00:00:2a","interface":"pod10e08a419e8"}},{{"name":"sriov-fast","namespace":"fixtures-infra","interface":"podc406e50018d"}}]"#
        )
    );
    let spec = pod.spec.expect("pod spec");
    assert_eq!(
        names(Some(&spec.containers), |c| &c.name),
        ["compute", "virtiofs-shared-files", "hook-sidecar-0"]
    );
    let compute = &spec.containers[0];
    let command = compute.command.clone().unwrap_or_default();
    let at = command.iter().position(|a| a == "--hook-sidecars").unwrap();
    assert_eq!(command[at + 1], "1");
    let volumes = names(spec.volumes.as_ref(), |v| &v.name);
    let tail: Vec<&str> = volumes
        .iter()
        .rev()
        .take(5)
        .rev()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        [
            "hook-sidecar-sockets",
            "hotplug-disks",
            "network-info-annotation",
            "virtiofs-containers",
            "fixture-hook-script"
        ]
    );
    let mounts = names(compute.volume_mounts.as_ref(), |m| &m.name);
    for m in [
        "hook-sidecar-sockets",
        "network-info-annotation",
        "virtiofs-containers",
    ] {
        assert!(
            mounts.contains(&m.to_string()),
            "compute mounts {m}: {mounts:?}"
        );
    }
    let virtiofs = &spec.containers[1];
    assert_eq!(
        virtiofs.args.clone().unwrap_or_default()[..2],
        [
            "--socket-path=/var/run/kubevirt/virtiofs-containers/shared-files.sock",
            "--shared-dir=/var/run/kubevirt-private/config-map/shared-files"
        ]
    );
    let sidecar = &spec.containers[2];
    assert_eq!(
        sidecar.image.as_deref(),
        Some("example.org/fixtures/hook-runner:1.0")
    );
    assert_eq!(
        names(sidecar.volume_mounts.as_ref(), |m| &m.name),
        ["hook-sidecar-sockets", "fixture-hook-script"]
    );
    env.shutdown().await;
}

/// The NetworkAttachmentDefinition CRD as Multus installs it (our own minimal YAML: group,
/// names, a schemaless v1), for the real API server; the embedded one serves NADs itself.
const NAD_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: network-attachment-definitions.k8s.cni.cncf.io
spec:
  group: k8s.cni.cncf.io
  scope: Namespaced
  names:
    plural: network-attachment-definitions
    singular: network-attachment-definition
    kind: NetworkAttachmentDefinition
    shortNames: [net-attach-def]
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#;

fn nads(env: &Env) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("k8s.cni.cncf.io", "v1", "NetworkAttachmentDefinition");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "network-attachment-definitions");
    Api::namespaced_with(env.client.clone(), &env.namespace, &ar)
}

/// Install the NAD CRD on the real server (once; kept for later scenarios) and wait until NADs
/// can be listed.
async fn serve_nads(env: &Env) {
    if env.server().is_real() {
        let crds: Api<DynamicObject> = Api::all_with(
            env.client.clone(),
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
                "customresourcedefinitions",
            ),
        );
        let crd: DynamicObject = serde_yaml::from_str(NAD_CRD).unwrap();
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("create the NAD CRD: {e}"),
        }
    }
    let api = nads(env);
    env.wait_for("NetworkAttachmentDefinitions to be served", || async {
        api.list(&Default::default()).await.ok()
    })
    .await;
}

/// template.go:427-433 and nad.go:48-70 with the Beta gate `ExternalNetResourceInjection`
/// disabled in the KubeVirt CR: the VMI controller reads the SR-IOV network's NAD while
/// rendering. Missing, the VMI gets `FailedCreate` "failed to render launch manifest: failed to
/// locate network attachment definition NS/NAME" and no pod; created with a
/// `k8s.v1.cni.cncf.io/resourceName`, the compute container requests and limits one of it.
async fn an_sriov_network_requests_the_resource_its_nad_names(server: Server) {
    let env = Env::start_on(server).await;
    let ns = env.namespace.clone();
    serve_nads(&env).await;
    env.create_kubevirt_cr(json!({"developerConfiguration": {
        "disabledFeatureGates": ["ExternalNetResourceInjection"]}}))
        .await;
    env.wait_for("the controller to load the KubeVirt CR", || async {
        let s = env.manager.debug_state()["settings"]["current"].clone();
        (s["disabledFeatureGates"] == json!(["ExternalNetResourceInjection"])).then_some(())
    })
    .await;

    let vmi: VirtualMachineInstance = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "sriov-vmi", "namespace": ns},
        "spec": {"domain": {"memory": {"guest": "256Mi"}, "devices": {"interfaces": [
                {"name": "default", "masquerade": {}}, {"name": "fast", "sriov": {}}]}},
            "networks": [{"name": "default", "pod": {}},
                {"name": "fast", "multus": {"networkName": "sriov-a"}}]}}))
    .unwrap();
    env.vmis()
        .create(&PostParams::default(), &vmi)
        .await
        .expect("create the VMI");
    let expected =
        format!("{FAILED_RENDER}failed to locate network attachment definition {ns}/sriov-a");
    env.wait_vmi_condition("sriov-vmi", "FailedCreate for the missing NAD", |c| {
        c.reason.as_deref() == Some("FailedCreate") && c.message.as_deref() == Some(&expected)
    })
    .await;
    let uid = env.vmi_uid("sriov-vmi").await.unwrap();
    assert!(
        env.launcher_pods(&uid).await.is_empty(),
        "no pod without the NAD"
    );

    let nad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "sriov-a",
            "annotations": {"k8s.v1.cni.cncf.io/resourceName": "example.org/sriov_a"}},
        "spec": {"config": "{\"cniVersion\": \"0.3.1\", \"type\": \"sriov\"}"}}))
    .unwrap();
    nads(&env)
        .create(&PostParams::default(), &nad)
        .await
        .expect("create the NAD");
    let pod = the_pod(&env, "sriov-vmi").await;
    let resources = pod.spec.unwrap().containers[0].resources.clone().unwrap();
    assert_eq!(resources.requests.unwrap()["example.org/sriov_a"].0, "1");
    assert_eq!(resources.limits.unwrap()["example.org/sriov_a"].0, "1");
    env.shutdown().await;
}

/// netbinding.go:29-70 with the KubeVirt CR followed live: once the CR registers the binding
/// plugin of docs/examples/more/vm-binding-plugin.yaml, the VM's launcher pod gets the plugin's
/// sidecar (`hook-sidecar-0`, `NETWORK_BINDING_PLUGIN_NAME`, `--hook-sidecars 1`) and the
/// plugin's memory in the compute container's request (explain-overhead's term).
async fn a_registered_binding_plugin_adds_its_sidecar(server: Server) {
    let env = Env::start_on(server).await;
    let binding = json!({"sidecarImage": "example.org/demo-slirp-binding:1",
        "computeResourceOverhead": {"requests": {"memory": "200Mi"}}});
    let configuration = json!({"network": {"binding": {"demo-slirp": binding}}});
    env.create_kubevirt_cr(configuration.clone()).await;
    env.wait_for("the controller to load the binding plugin", || async {
        let s = env.manager.debug_state()["settings"]["current"].clone();
        s["networkBindings"]["demo-slirp"]["sidecarImage"]
            .as_str()
            .map(|_| ())
    })
    .await;
    let vm: virtctl_rs::api::VirtualMachine = common::example_vm("more/vm-binding-plugin.yaml");
    env.create_vm(&vm).await;
    let pod = the_pod(&env, "demo-binding-plugin").await;
    let spec = pod.spec.expect("pod spec");
    let sidecar = spec
        .containers
        .iter()
        .find(|c| c.name == "hook-sidecar-0")
        .expect("the binding plugin's sidecar");
    assert_eq!(
        sidecar.image.as_deref(),
        Some("example.org/demo-slirp-binding:1")
    );
    let env_vars: Vec<(String, String)> = sidecar
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    assert!(env_vars.contains(&("NETWORK_BINDING_PLUGIN_NAME".into(), "demo-slirp".into())));
    let command = spec.containers[0].command.clone().unwrap_or_default();
    let at = command.iter().position(|a| a == "--hook-sidecars").unwrap();
    assert_eq!(command[at + 1], "1");
    // The formula's request with the CR's settings, 200Mi above the one without the plugin.
    let memory = &spec.containers[0]
        .resources
        .clone()
        .unwrap()
        .requests
        .unwrap()["memory"];
    let request = |settings: &ClusterSettings| {
        let object = KubeVirtObject::Vm(Box::new(vm.clone()));
        let explained = explain(&object, &env.namespace, settings).expect("explain the VM");
        explained.compute_resources.requests["memory"].0.clone()
    };
    let cr = json!({"kind": "KubeVirt", "spec": {"configuration": configuration}});
    let with_plugin = ClusterSettings::from_kubevirt_cr(&cr).expect("the CR's settings");
    let bytes = |q: &str| ParsedQuantity::parse(q).unwrap().value();
    assert_eq!(memory.0, request(&with_plugin));
    assert_eq!(
        bytes(&memory.0) - bytes(&request(&ClusterSettings::default())),
        200 * 1024 * 1024
    );
    env.shutdown().await;
}

/// template.go:164-193 with docs/examples/more/vm-persistent-reservation.yaml: the VMI
/// controller reads the reserved claim from its cache; the pod carries
/// `pr.kubevirt.io/<claim UID>: ""` and a required anti-affinity term on that label per node.
async fn a_reserved_lun_keeps_its_pod_apart_from_other_reservers(server: Server) {
    let env = Env::start_on(server).await;
    let file = "more/vm-persistent-reservation.yaml";
    env.create_example_claims(file).await;
    let claim = env.pvcs().get("demo-shared-lun").await.expect("the claim");
    let key = format!("pr.kubevirt.io/{}", claim.metadata.uid.unwrap());
    env.create_vm(&common::example_vm(file)).await;
    let pod = the_pod(&env, "demo-persistent-reservation").await;
    assert_eq!(
        pod.metadata.labels.unwrap_or_default().get(&key),
        Some(&String::new())
    );
    let anti = pod
        .spec
        .and_then(|s| s.affinity)
        .and_then(|a| a.pod_anti_affinity)
        .and_then(|a| a.required_during_scheduling_ignored_during_execution)
        .expect("a required pod anti-affinity");
    let terms: Vec<(String, String, String)> = anti
        .iter()
        .flat_map(|t| {
            let exprs = t
                .label_selector
                .as_ref()
                .and_then(|s| s.match_expressions.clone())
                .unwrap_or_default();
            exprs
                .into_iter()
                .map(|e| (e.key, e.operator, t.topology_key.clone()))
        })
        .collect();
    assert_eq!(
        terms,
        [(
            key,
            "Exists".to_string(),
            "kubernetes.io/hostname".to_string()
        )]
    );
    env.shutdown().await;
}

/// Quantities as `(resource, text)` pairs.
type Pairs = Vec<(String, String)>;

/// renderresources.go:535-625, serialconsolelog.go:68-92, container-disk.go:445-477 with the
/// CR of docs/examples/more/vm-support-resources.yaml followed live: the VM's pod gets the
/// CR's quantities where it sets them and KubeVirt's defaults elsewhere.
async fn support_container_resources_size_the_support_containers(server: Server) {
    let env = Env::start_on(server).await;
    env.create_kubevirt_cr(json!({"supportContainerResources": [
        {"type": "sidecar", "resources": {"requests": {"memory": "32Mi"},
            "limits": {"cpu": "250m", "memory": "128Mi"}}},
        {"type": "guest-console-log", "resources": {"limits": {"memory": "96M"}}},
        {"type": "container-disk", "resources": {"requests": {"cpu": "5m"}}}]}))
        .await;
    env.wait_for(
        "the controller to load supportContainerResources",
        || async {
            let s = env.manager.debug_state()["settings"]["current"].clone();
            s["supportContainerResources"].as_array().map(|_| ())
        },
    )
    .await;
    env.create_vm(&common::example_vm("more/vm-support-resources.yaml"))
        .await;
    let pod = the_pod(&env, "demo-support-resources").await;
    let spec = pod.spec.expect("pod spec");
    let all: Vec<&k8s_openapi::api::core::v1::Container> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .collect();
    let resources = |name: &str| -> (Pairs, Pairs) {
        let c = all.iter().find(|c| c.name == name).expect(name);
        let r = c.resources.clone().unwrap_or_default();
        let text = |m: Option<std::collections::BTreeMap<String, _>>| {
            m.unwrap_or_default()
                .into_iter()
                .map(
                    |(k, v): (
                        String,
                        k8s_openapi::apimachinery::pkg::api::resource::Quantity,
                    )| (k, v.0),
                )
                .collect()
        };
        (text(r.requests), text(r.limits))
    };
    let pairs = |l: &[(&str, &str)]| -> Vec<(String, String)> {
        l.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    // The sidecar's CPU request is the API server's default from its limit (core/v1 defaults:
    // a request left out takes the limit); the renderer writes only the memory request.
    assert_eq!(
        resources("hook-sidecar-0"),
        (
            pairs(&[("cpu", "250m"), ("memory", "32Mi")]),
            pairs(&[("cpu", "250m"), ("memory", "128Mi")])
        )
    );
    assert_eq!(
        resources("guest-console-log"),
        (
            pairs(&[("cpu", "5m"), ("memory", "35M")]),
            pairs(&[("cpu", "15m"), ("memory", "96M")])
        )
    );
    assert_eq!(
        resources("volumeroot"),
        (
            pairs(&[
                ("cpu", "5m"),
                ("ephemeral-storage", "50M"),
                ("memory", "1M")
            ]),
            pairs(&[("cpu", "10m"), ("memory", "40M")])
        )
    );
    env.shutdown().await;
}

/// template.go:525-547, 700-715, 937, 963 and serialconsolelog.go:26 with the CR of
/// docs/examples/more/vm-launcher-settings.yaml (without the runtime class, whose RuntimeClass
/// object the real API server would look up): the pull policy on the launcher image's
/// containers, the verbosity in the compute env, the pod's seccomp profile.
async fn the_crs_launcher_settings_reach_the_pod(server: Server) {
    let env = Env::start_on(server).await;
    env.create_kubevirt_cr(json!({"imagePullPolicy": "Always",
        "developerConfiguration": {"logVerbosity": {"virtLauncher": 4}},
        "seccompConfiguration": {"virtualMachineInstanceProfile": {
            "customProfile": {"localhostProfile": "kubevirt/kubevirt.json"}}}}))
        .await;
    env.wait_for("the controller to load the launcher settings", || async {
        let s = env.manager.debug_state()["settings"]["current"].clone();
        (s["imagePullPolicy"] == "Always").then_some(())
    })
    .await;
    env.create_vm(&common::example_vm("more/vm-launcher-settings.yaml"))
        .await;
    let pod = the_pod(&env, "demo-launcher-settings").await;
    let spec = pod.spec.expect("pod spec");
    let compute = &spec.containers[0];
    assert_eq!(compute.image_pull_policy.as_deref(), Some("Always"));
    let console = spec
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == "guest-console-log")
        .expect("the console-log init container");
    assert_eq!(console.image_pull_policy.as_deref(), Some("Always"));
    let verbosity = compute
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "VIRT_LAUNCHER_LOG_VERBOSITY")
        .and_then(|e| e.value.clone());
    assert_eq!(verbosity.as_deref(), Some("4"));
    let seccomp = spec
        .security_context
        .and_then(|s| s.seccomp_profile)
        .expect("a seccomp profile");
    assert_eq!(
        (seccomp.type_.as_str(), seccomp.localhost_profile.as_deref()),
        ("Localhost", Some("kubevirt/kubevirt.json"))
    );
    env.shutdown().await;
}

/// The KubeVirt CR's feature gates, disk-verification limit and `permittedHostDevices` reach
/// the VMI controller's renderer: `--disk-memory-limit` is the CR's; with the Alpha gate `HypervStrictCheck`, a VMI with host-dependent Hyper-V
/// enlightenments gets a pod requiring their node labels (nodeselectorrenderer.go:204-297); a
/// VMI asking for a GPU the CR does not permit gets `Synchronized=False` `FailedCreate` "failed
/// to render launch manifest: GPU … is not permitted in permittedHostDevices configuration" and
/// no pod (renderresources.go:493-531, template.go:1031-1033), while a permitted one gets its pod.
async fn the_crs_gates_and_permitted_devices_shape_the_pod(server: Server) {
    let env = Env::start_on(server).await;
    let ns = env.namespace.clone();
    env.create_kubevirt_cr(json!({
        "developerConfiguration": {"featureGates": ["HypervStrictCheck"],
            "diskVerification": {"memoryLimit": "1Gi"}},
        "permittedHostDevices": {"pciHostDevices": [
            {"pciVendorSelector": "10DE:1EB8", "resourceName": "example.org/fpga"}]}}))
        .await;
    env.wait_for("the controller to load the CR", || async {
        let s = env.manager.debug_state()["settings"]["current"].clone();
        (s["permittedHostDevices"] == json!(["example.org/fpga"])).then_some(())
    })
    .await;
    let vmi = |name: &str, domain: serde_json::Value| -> VirtualMachineInstance {
        let mut domain = domain;
        domain["memory"] = json!({"guest": "128Mi"});
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "namespace": ns}, "spec": {"domain": domain}}))
        .unwrap()
    };
    let on = json!({"enabled": true});
    let hyperv = vmi(
        "hyperv",
        json!({"features": {"hyperv": {"relaxed": on, "synic": on, "vpindex": on,
            "synictimer": {"enabled": true}, "evmcs": {}}}}),
    );
    let refused = vmi(
        "refused-gpu",
        json!({"devices": {"gpus": [{"name": "g", "deviceName": "example.org/gpu"}]}}),
    );
    let permitted = vmi(
        "permitted-fpga",
        json!({"devices": {"hostDevices": [{"name": "f", "deviceName": "example.org/fpga"}]}}),
    );
    for v in [&hyperv, &refused, &permitted] {
        env.vmis()
            .create(&PostParams::default(), v)
            .await
            .expect("create the VMI");
    }
    let pod = the_pod(&env, "hyperv").await;
    let spec = pod.spec.unwrap();
    let command = spec.containers[0].command.clone().unwrap_or_default();
    let at = command.iter().position(|a| a == "--disk-memory-limit");
    assert_eq!(
        at.map(|i| command[i + 1].as_str()),
        Some("1073741824"),
        "the CR's disk-verification limit (template.go:471)"
    );
    let selector = spec.node_selector.unwrap_or_default();
    let hyperv_labels: Vec<(&str, &str)> = selector
        .iter()
        .filter(|(k, _)| k.starts_with("hyperv.") || k.starts_with("cpu-vendor."))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        hyperv_labels,
        vec![
            ("cpu-vendor.node.kubevirt.io/Intel", "true"),
            ("hyperv.node.kubevirt.io/synic", "true"),
            ("hyperv.node.kubevirt.io/synictimer", "true"),
            ("hyperv.node.kubevirt.io/vpindex", "true"),
        ]
    );

    let expected = format!(
        "{FAILED_RENDER}GPU example.org/gpu is not permitted in permittedHostDevices configuration"
    );
    env.wait_vmi_condition("refused-gpu", "Synchronized=False FailedCreate", |c| {
        c.type_ == "Synchronized"
            && c.status == "False"
            && c.reason.as_deref() == Some("FailedCreate")
            && c.message.as_deref() == Some(expected.as_str())
    })
    .await;
    let pod = the_pod(&env, "permitted-fpga").await;
    let limits = pod.spec.unwrap().containers[0]
        .resources
        .clone()
        .unwrap()
        .limits
        .unwrap();
    assert_eq!(limits["example.org/fpga"].0, "1");
    let uid = env.vmi_uid("refused-gpu").await.unwrap();
    assert!(
        env.launcher_pods(&uid).await.is_empty(),
        "no pod for a device the CR does not permit"
    );
    env.shutdown().await;
}

on_both_servers!(
    the_crs_gates_and_permitted_devices_shape_the_pod,
    a_hook_sidecar_configmap_is_read_while_rendering,
    the_crs_launcher_settings_reach_the_pod,
    support_container_resources_size_the_support_containers,
    a_reserved_lun_keeps_its_pod_apart_from_other_reservers,
    a_vmi_with_networks_hooks_and_virtiofs_gets_kubevirts_pod,
    an_sriov_network_requests_the_resource_its_nad_names,
    a_registered_binding_plugin_adds_its_sidecar,
);
