// Command crds writes the CustomResourceDefinitions that the tests' real API server serves,
// laid out as KubeVirt v1.9.0's virt-operator installs them.
//
// The schemas are generated the way KubeVirt and CDI generate theirs: controller-gen over the
// API types of the kubevirt.io/api v1.9.0 and CDI API modules (KubeVirt: hack/generate.sh:135-176,
// tools/crd-validation-generator). scripts/envtest.sh runs controller-gen into GENERATED; this
// program takes each kind's schema from there and wraps it as virt-operator does
// (pkg/virt-operator/resource/generate/components/crds.go): names, scope, served versions,
// printer columns and subresources. Nothing is hand-trimmed, so pruning and validation on the
// test server are a real cluster's.
//
// Usage: crds GENERATED OUT   (one YAML file per CRD in OUT, named after the CRD)
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	virtv1 "kubevirt.io/api/core/v1"
	// Loaded so that controller-gen, run from this module, can read CDI's API types.
	_ "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/yaml"
)

// kubevirtCrd is one of virt-operator's CRDs: the kind whose schema it carries, and what
// crds.go sets around the schema.
type kubevirtCrd struct {
	kind       string
	plural     string
	singular   string
	shortNames []string
	group      string
	scope      extv1.ResourceScope
	// allVersions: served as every version of virtv1.ApiSupportedVersions (crds.go:134-138,
	// newCRDVersions); otherwise only as its own generated version.
	allVersions bool
	columns     []extv1.CustomResourceColumnDefinition
	status      bool
	label       string
}

const (
	core         = "kubevirt.io"
	instancetype = "instancetype.kubevirt.io"
	age          = ".metadata.creationTimestamp"
	phase        = ".status.phase"
)

func date(name, path string) extv1.CustomResourceColumnDefinition {
	return extv1.CustomResourceColumnDefinition{Name: name, Type: "date", JSONPath: path}
}

func text(name, path string, priority int32) extv1.CustomResourceColumnDefinition {
	return extv1.CustomResourceColumnDefinition{Name: name, Type: "string", JSONPath: path, Priority: priority}
}

// kubevirtCrds lists what the tests need, each as crds.go builds it (line of its constructor).
var kubevirtCrds = []kubevirtCrd{
	// crds.go:149 NewVirtualMachineInstanceCrd: no subresources, so the VMI's status is
	// written through the object itself.
	{kind: "VirtualMachineInstance", plural: "virtualmachineinstances", singular: "virtualmachineinstance",
		shortNames: []string{"vmi", "vmis"}, group: core, scope: extv1.NamespaceScoped, allVersions: true,
		columns: []extv1.CustomResourceColumnDefinition{
			date("Age", age), text("Phase", phase, 0),
			text("IP", ".status.interfaces[0].ipAddress", 0), text("NodeName", ".status.nodeName", 0),
			text("Ready", ".status.conditions[?(@.type=='Ready')].status", 0),
			text("Live-Migratable", ".status.conditions[?(@.type=='LiveMigratable')].status", 1),
			text("Paused", ".status.conditions[?(@.type=='Paused')].status", 1),
		}},
	// crds.go:187 NewVirtualMachineCrd: the status subresource.
	{kind: "VirtualMachine", plural: "virtualmachines", singular: "virtualmachine",
		shortNames: []string{"vm", "vms"}, group: core, scope: extv1.NamespaceScoped, allVersions: true,
		columns: []extv1.CustomResourceColumnDefinition{
			date("Age", age),
			{Name: "Status", Description: "Human Readable Status", Type: "string", JSONPath: ".status.printableStatus"},
			text("Ready", ".status.conditions[?(@.type=='Ready')].status", 0),
		}, status: true},
	// crds.go:309 NewVirtualMachineInstanceMigrationCrd.
	{kind: "VirtualMachineInstanceMigration", plural: "virtualmachineinstancemigrations",
		singular: "virtualmachineinstancemigration", shortNames: []string{"vmim", "vmims"}, group: core,
		scope: extv1.NamespaceScoped, allVersions: true,
		columns: []extv1.CustomResourceColumnDefinition{
			{Name: "Phase", Type: "string", JSONPath: phase,
				Description: "The current phase of VM instance migration"},
			{Name: "VMI", Type: "string", JSONPath: ".spec.vmiName",
				Description: "The name of the VMI to perform the migration on"},
		}, status: true},
	// crds.go:351 NewKubeVirtCrd: its own label, the status subresource.
	{kind: "KubeVirt", plural: "kubevirts", singular: "kubevirt", shortNames: []string{"kv", "kvs"},
		group: core, scope: extv1.NamespaceScoped, allVersions: true,
		columns: []extv1.CustomResourceColumnDefinition{date("Age", age), text("Phase", phase, 0)},
		status:  true, label: "operator.kubevirt.io"},
	// crds.go:766-882: the instancetype and preference kinds, v1beta1 only, no subresources.
	{kind: "VirtualMachineInstancetype", plural: "virtualmachineinstancetypes",
		singular: "virtualmachineinstancetype", group: instancetype, scope: extv1.NamespaceScoped,
		shortNames: []string{"vminstancetype", "vminstancetypes", "vmf", "vmfs"}},
	{kind: "VirtualMachineClusterInstancetype", plural: "virtualmachineclusterinstancetypes",
		singular: "virtualmachineclusterinstancetype", group: instancetype, scope: extv1.ClusterScoped,
		shortNames: []string{"vmclusterinstancetype", "vmclusterinstancetypes", "vmcf", "vmcfs"}},
	{kind: "VirtualMachinePreference", plural: "virtualmachinepreferences",
		singular: "virtualmachinepreference", group: instancetype, scope: extv1.NamespaceScoped,
		shortNames: []string{"vmpref", "vmprefs", "vmp", "vmps"}},
	{kind: "VirtualMachineClusterPreference", plural: "virtualmachineclusterpreferences",
		singular: "virtualmachineclusterpreference", group: instancetype, scope: extv1.ClusterScoped,
		shortNames: []string{"vmcp", "vmcps"}},
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: crds GENERATED OUT")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "crds:", err)
		os.Exit(1)
	}
}

func run(generated, out string) error {
	schemas, err := readGenerated(generated)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, c := range kubevirtCrds {
		gen, ok := schemas[c.group+"/"+c.kind]
		if !ok {
			return fmt.Errorf("controller-gen wrote no CRD for %s/%s", c.group, c.kind)
		}
		if err := write(out, c.build(gen)); err != nil {
			return err
		}
	}
	// CDI's operator installs the DataVolume CRD as controller-gen generates it.
	dv, ok := schemas["cdi.kubevirt.io/DataVolume"]
	if !ok {
		return fmt.Errorf("controller-gen wrote no CRD for cdi.kubevirt.io/DataVolume")
	}
	return write(out, dv)
}

// build wraps the generated schema as crds.go does.
func (c kubevirtCrd) build(gen *extv1.CustomResourceDefinition) *extv1.CustomResourceDefinition {
	label := c.label
	if label == "" {
		label = virtv1.AppLabel // newBlankCrd, crds.go:120-132
	}
	schema := gen.Spec.Versions[0].Schema
	var versions []extv1.CustomResourceDefinitionVersion
	if c.allVersions {
		versions = append(versions, virtv1.ApiSupportedVersions...)
	} else {
		versions = []extv1.CustomResourceDefinitionVersion{{Name: gen.Spec.Versions[0].Name, Served: true, Storage: true}}
	}
	for i := range versions {
		versions[i].Schema = schema.DeepCopy()
		versions[i].AdditionalPrinterColumns = c.columns
		if c.status {
			versions[i].Subresources = &extv1.CustomResourceSubresources{Status: &extv1.CustomResourceSubresourceStatus{}}
		}
	}
	crd := &extv1.CustomResourceDefinition{
		Spec: extv1.CustomResourceDefinitionSpec{
			Group: c.group,
			Names: extv1.CustomResourceDefinitionNames{
				Plural: c.plural, Singular: c.singular, Kind: c.kind, ShortNames: c.shortNames,
			},
			Scope:    c.scope,
			Versions: versions,
		},
	}
	// Every namespaced kind is in the "all" category; the cluster-scoped instancetype and
	// preference are not (crds.go:796-882).
	if c.scope == extv1.NamespaceScoped {
		crd.Spec.Names.Categories = []string{"all"}
	}
	if c.group == instancetype {
		crd.Spec.Conversion = &extv1.CustomResourceConversion{Strategy: extv1.NoneConverter}
	}
	crd.APIVersion = "apiextensions.k8s.io/v1"
	crd.Kind = "CustomResourceDefinition"
	crd.Name = c.plural + "." + c.group
	crd.Labels = map[string]string{label: ""}
	return crd
}

// readGenerated reads controller-gen's output: every CRD it wrote, by group/kind.
func readGenerated(dir string) (map[string]*extv1.CustomResourceDefinition, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	found := map[string]*extv1.CustomResourceDefinition{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		body, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		var crd extv1.CustomResourceDefinition
		if err := yaml.Unmarshal(body, &crd); err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		if len(crd.Spec.Versions) == 0 || crd.Spec.Versions[0].Schema == nil {
			return nil, fmt.Errorf("%s: no schema", e.Name())
		}
		found[crd.Spec.Group+"/"+crd.Spec.Names.Kind] = &crd
	}
	return found, nil
}

func write(dir string, crd *extv1.CustomResourceDefinition) error {
	body, err := yaml.Marshal(crd)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, crd.Name+".yaml")
	if err := os.WriteFile(path, body, 0o644); err != nil {
		return err
	}
	fmt.Println(path)
	return nil
}
