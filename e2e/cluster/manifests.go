package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// FieldManager is the server-side apply field manager for objects the test
// bed installs, so they are told apart from the operators' own writes.
const FieldManager = "fleetmesh-e2e"

// Modules and paths of the third-party CRDs the operators build objects for.
// The API server validating our objects against these schemas is an oracle
// nobody on the team wrote.
const (
	GatewayAPIModule  = "sigs.k8s.io/gateway-api"
	GatewayAPICRDPath = "config/crd/standard"
	IstioAPIModule    = "istio.io/api"
	IstioAPICRDPath   = "kubernetes/customresourcedefinitions.gen.yaml"
)

// DefaultCRDPaths returns the Gateway API standard channel and the Istio CRDs,
// located in the module cache at the versions the e2e module's go.mod pins.
func DefaultCRDPaths(ctx context.Context) ([]string, error) {
	dir, err := E2EModuleDir()
	if err != nil {
		return nil, err
	}
	gateway, err := ModuleDir(ctx, dir, GatewayAPIModule)
	if err != nil {
		return nil, err
	}
	istio, err := ModuleDir(ctx, dir, IstioAPIModule)
	if err != nil {
		return nil, err
	}
	return []string{
		filepath.Join(gateway, GatewayAPICRDPath),
		filepath.Join(istio, IstioAPICRDPath),
	}, nil
}

// LoadManifests reads every object from the given YAML files and directories
// (a directory contributes its *.yaml, *.yml and *.json files, sorted, not
// recursing). Kustomization files and empty documents are skipped.
func LoadManifests(paths ...string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, path := range paths {
		files, err := manifestFiles(path)
		if err != nil {
			return nil, err
		}
		for _, file := range files {
			fileObjs, err := decodeFile(file)
			if err != nil {
				return nil, err
			}
			objs = append(objs, fileObjs...)
		}
	}
	return objs, nil
}

func manifestFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		if strings.HasPrefix(e.Name(), "kustomization.") {
			continue
		}
		files = append(files, filepath.Join(path, e.Name()))
	}
	sort.Strings(files)
	return files, nil
}

func decodeFile(file string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var objs []*unstructured.Unstructured
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		obj := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &obj.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(obj.Object) == 0 || obj.GetKind() == "" {
			continue // comments-only or empty document
		}
		if obj.GetKind() == "Kustomization" {
			continue
		}
		objs = append(objs, obj)
	}
}

// InstallManifests applies every object found in paths with server-side
// apply. CRDs go first and must be Established before the other objects are
// applied, because those may be instances of them or refer to them.
func InstallManifests(ctx context.Context, cfg *rest.Config, paths ...string) error {
	objs, err := LoadManifests(paths...)
	if err != nil {
		return err
	}
	var crds, others []*unstructured.Unstructured
	for _, obj := range objs {
		if obj.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, obj)
		} else {
			others = append(others, obj)
		}
	}
	if err := applyObjects(ctx, cfg, crds); err != nil {
		return err
	}
	names := make([]string, 0, len(crds))
	for _, crd := range crds {
		names = append(names, crd.GetName())
	}
	if err := WaitCRDsEstablished(ctx, cfg, names...); err != nil {
		return err
	}
	return applyObjects(ctx, cfg, others)
}

// applyObjects server-side applies objs a few at a time: CRD schemas are
// large, and parallel requests keep a cold API server busy on both cores.
func applyObjects(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured) error {
	if len(objs) == 0 {
		return nil
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))

	const workers = 4
	work := make(chan *unstructured.Unstructured)
	errs := make(chan error, len(objs))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for obj := range work {
				errs <- applyObject(ctx, dyn, mapper, obj)
			}
		})
	}
	for _, obj := range objs {
		work <- obj
	}
	close(work)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		if err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

func applyObject(ctx context.Context, dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	var client dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == "namespace" {
		ns := obj.GetNamespace()
		if ns == "" {
			ns = "default"
		}
		client = dyn.Resource(mapping.Resource).Namespace(ns)
	}
	_, err = client.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("apply %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	return nil
}

// WaitCRDsEstablished polls until every named CRD reports Established, which
// is when clients may create its instances.
func WaitCRDsEstablished(ctx context.Context, cfg *rest.Config, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	pending := names
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.ApiextensionsV1().CustomResourceDefinitions().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil // transient while the API server warms up
		}
		pending = notEstablished(list.Items, names)
		return len(pending) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("CRDs not established: %s: %w", strings.Join(pending, ", "), err)
	}
	return nil
}

func notEstablished(crds []apiextensionsv1.CustomResourceDefinition, names []string) []string {
	established := map[string]bool{}
	for _, crd := range crds {
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				established[crd.Name] = true
			}
		}
	}
	var pending []string
	for _, name := range names {
		if !established[name] {
			pending = append(pending, name)
		}
	}
	return pending
}
