package config_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cairn-db/cairn/config"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// k8sObjects is deploy/kubernetes decoded into Kubernetes' own API types,
// strictly: a field the API does not have, or a value of the wrong type, is
// an error, as kubectl apply --validate=strict would say (the schema check
// runs without a cluster and without downloading schemas).
type k8sObjects struct {
	services map[string]corev1.Service
	sets     map[string]appsv1.StatefulSet
	pdbs     map[string]policyv1.PodDisruptionBudget
	secrets  map[string]corev1.Secret
	jobs     map[string]batchv1.Job
}

func loadK8s(t *testing.T) k8sObjects {
	t.Helper()
	o := k8sObjects{services: map[string]corev1.Service{}, sets: map[string]appsv1.StatefulSet{},
		pdbs: map[string]policyv1.PodDisruptionBudget{}, secrets: map[string]corev1.Secret{}, jobs: map[string]batchv1.Job{}}
	files, err := filepath.Glob("../deploy/kubernetes/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			where := fmt.Sprintf("%s document %d", filepath.Base(f), i+1)
			var tm metav1.TypeMeta
			require.NoError(t, yaml.Unmarshal([]byte(doc), &tm), where)
			name := decodeK8s(t, o, tm, []byte(doc), where)
			require.NotEmpty(t, name, "%s: %s has no name", where, tm.Kind)
		}
	}
	return o
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// decodeK8s decodes one document by its kind and files it; it returns the
// object's name.
func decodeK8s(t *testing.T, o k8sObjects, tm metav1.TypeMeta, doc []byte, where string) string {
	t.Helper()
	strict := func(v any) {
		require.NoError(t, yaml.UnmarshalStrict(doc, v), "%s (%s): not valid against the Kubernetes API", where, tm.Kind)
	}
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Service":
		var v corev1.Service
		strict(&v)
		o.services[v.Name] = v
		return v.Name
	case "apps/v1 StatefulSet":
		var v appsv1.StatefulSet
		strict(&v)
		o.sets[v.Name] = v
		return v.Name
	case "policy/v1 PodDisruptionBudget":
		var v policyv1.PodDisruptionBudget
		strict(&v)
		o.pdbs[v.Name] = v
		return v.Name
	case "v1 Secret":
		var v corev1.Secret
		strict(&v)
		o.secrets[v.Name] = v
		return v.Name
	case "batch/v1 Job":
		var v batchv1.Job
		strict(&v)
		o.jobs[v.Name] = v
		return v.Name
	}
	t.Fatalf("%s: unexpected %s %s", where, tm.APIVersion, tm.Kind)
	return ""
}

// expandK8s replaces $(VAR) references in a container's argument the way
// the kubelet does, from the container's env (fieldRef metadata.name is the
// pod's name).
func expandK8s(arg string, c corev1.Container, pod string) string {
	vals := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			vals[e.Name] = pod
		case e.ValueFrom == nil:
			vals[e.Name] = e.Value
		}
	}
	return regexp.MustCompile(`\$\(([A-Z_][A-Z0-9_]*)\)`).ReplaceAllStringFunc(arg, func(m string) string {
		if v, ok := vals[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// podConfig parses pod's command line (its args and env, expanded) with
// Cairn's own parser, as the container would at start-up. A file argument on
// a mounted secret reads that secret's key (written to a temporary file),
// so a missing key fails here as it would in the pod.
func podConfig(t *testing.T, o k8sObjects, set appsv1.StatefulSet, ordinal int) (config.Config, corev1.Container) {
	t.Helper()
	require.Len(t, set.Spec.Template.Spec.Containers, 1, "%s: one container", set.Name)
	c := set.Spec.Template.Spec.Containers[0]
	pod := fmt.Sprintf("%s-%d", set.Name, ordinal)
	dir := t.TempDir()
	var args []string
	for _, a := range c.Args {
		e := expandK8s(a, c, pod)
		require.NotContains(t, e, "$(", "%s: %q references a variable the container does not set", set.Name, a)
		if flag, path, ok := strings.Cut(e, "="); ok && strings.HasSuffix(flag, "-file") {
			e = flag + "=" + secretFile(t, o, set, c, path, dir)
		}
		args = append(args, e)
	}
	env := func(k string) (string, bool) {
		for _, e := range c.Env {
			if e.Name == k && e.ValueFrom == nil {
				return e.Value, true
			}
		}
		return "", false
	}
	cfg, err := config.Parse(args, env, false, io.Discard)
	require.NoError(t, err, "%s: the command line is refused by cairn", pod)
	return cfg, c
}

// secretFile is where path, a file on a secret volume of c, holds its key's
// value in the test.
func secretFile(t *testing.T, o k8sObjects, set appsv1.StatefulSet, c corev1.Container, path, dir string) string {
	t.Helper()
	m, ok := mounted(c, path)
	require.True(t, ok, "%s: %s is not under a mount", set.Name, path)
	var secret string
	for _, v := range set.Spec.Template.Spec.Volumes {
		if v.Name == m.Name && v.Secret != nil {
			secret = v.Secret.SecretName
		}
	}
	require.NotEmpty(t, secret, "%s: %s is not on a secret volume", set.Name, path)
	val, ok := o.secrets[secret].StringData[filepath.Base(path)]
	require.True(t, ok, "%s: secret %s has no key for %s", set.Name, secret, path)
	f := filepath.Join(dir, filepath.Base(path))
	require.NoError(t, os.WriteFile(f, []byte(val+"\n"), 0o600))
	return f
}

func mounted(c corev1.Container, path string) (corev1.VolumeMount, bool) {
	for _, m := range c.VolumeMounts {
		if path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}

// TestKubernetes: the manifests are valid Kubernetes objects and make a
// cluster that works: a 3-member etcd+master+broker set whose members agree
// on their initial cluster and find each other through a headless service
// published before they are ready, storage nodes that reach those members,
// every command line accepted by cairn, data on a persistent volume at the
// data dir, secrets read from files of a mounted secret that has those
// keys, readiness on /api/v1/ready, a liveness check that does not restart a
// node that fenced itself, a grace period for the storage hand-off, and a
// disruption budget per set that lets one pod go at a time.
func TestKubernetes(t *testing.T) {
	o := loadK8s(t)
	meta, storage := o.sets["cairn-meta"], o.sets["cairn-storage"]
	require.NotEmpty(t, meta.Name, "the cairn-meta StatefulSet")
	require.NotEmpty(t, storage.Name, "the cairn-storage StatefulSet")

	var clientURLs []string
	for _, set := range []appsv1.StatefulSet{meta, storage} {
		checkStatefulSet(t, o, set)
		for i := range int(*set.Spec.Replicas) {
			cfg, _ := podConfig(t, o, set, i)
			pod := fmt.Sprintf("%s-%d", set.Name, i)
			require.Equal(t, fmt.Sprintf("%s.%s:9000", pod, set.Spec.ServiceName), cfg.AdvertiseAddr, "%s advertises its stable name", pod)
			if set.Name == meta.Name {
				require.True(t, cfg.HasRole(config.RoleEtcd) && cfg.HasRole(config.RoleMaster) && cfg.HasRole(config.RoleBroker), "%s: roles %v", pod, cfg.Roles)
				require.Equal(t, pod, cfg.EtcdName)
				peer := fmt.Sprintf("http://%s.%s:2380", pod, set.Spec.ServiceName)
				require.Equal(t, peer, cfg.EtcdAdvertisePeerURL)
				require.Contains(t, strings.Split(cfg.EtcdInitialCluster, ","), pod+"="+peer, "%s is in the initial cluster", pod)
				require.Len(t, strings.Split(cfg.EtcdInitialCluster, ","), int(*set.Spec.Replicas), "the initial cluster names every member")
				clientURLs = append(clientURLs, cfg.EtcdAdvertiseClientURL)
				continue
			}
			require.Equal(t, []string{"storage"}, cfg.Roles)
			require.NotEmpty(t, cfg.StorageCluster)
			require.ElementsMatch(t, clientURLs, cfg.EtcdEndpoints, "%s reaches every etcd member", pod)
		}
	}
	require.Equal(t, int32(3), *meta.Spec.Replicas, "three etcd members: a quorum survives one")
	require.Equal(t, appsv1.ParallelPodManagement, meta.Spec.PodManagementPolicy, "etcd members start together")
	require.True(t, o.services[meta.Spec.ServiceName].Spec.PublishNotReadyAddresses, "members find each other before they are ready")
	require.GreaterOrEqual(t, *storage.Spec.Template.Spec.TerminationGracePeriodSeconds, int64(30), "storage nodes hand their leaderships off on SIGTERM")

	// A service for users selects the brokers.
	var api bool
	for _, s := range o.services {
		if s.Spec.ClusterIP != corev1.ClusterIPNone && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(meta.Spec.Template.Labels)) {
			api = true
		}
	}
	require.True(t, api, "a ClusterIP service in front of the brokers")

	// The init job creates the storage cluster the storage nodes join, with
	// the admin token from the secret.
	require.Len(t, o.jobs, 1)
	for _, j := range o.jobs {
		c := j.Spec.Template.Spec.Containers[0]
		script := strings.Join(c.Command, " ")
		storageCfg, _ := podConfig(t, o, storage, 0)
		require.Contains(t, script, `"name":"`+storageCfg.StorageCluster+`"`)
		require.Contains(t, script, "/api/v1/storage-clusters")
		for _, e := range c.Env {
			if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
				require.Contains(t, o.secrets[ref.SecretKeyRef.Name].StringData, ref.SecretKeyRef.Key, "job env %s", e.Name)
			}
		}
	}
}

// checkStatefulSet checks what every Cairn set needs.
func checkStatefulSet(t *testing.T, o k8sObjects, set appsv1.StatefulSet) {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	require.NoError(t, err)
	podLabels := labels.Set(set.Spec.Template.Labels)
	require.True(t, sel.Matches(podLabels), "%s: the selector matches its pods", set.Name)
	svc, ok := o.services[set.Spec.ServiceName]
	require.True(t, ok, "%s: its service %s is declared", set.Name, set.Spec.ServiceName)
	require.Equal(t, corev1.ClusterIPNone, svc.Spec.ClusterIP, "%s: the governing service is headless", set.Name)
	require.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels), "%s: its service selects its pods", set.Name)

	cfg, c := podConfig(t, o, set, 0)
	require.NotNil(t, c.ReadinessProbe)
	require.NotNil(t, c.ReadinessProbe.HTTPGet, "%s: readiness over HTTP", set.Name)
	require.Equal(t, "/api/v1/ready", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, int32(9000), c.ReadinessProbe.HTTPGet.Port.IntVal)
	require.NotNil(t, c.LivenessProbe)
	require.Nil(t, c.LivenessProbe.HTTPGet, "%s: liveness must not restart a node that fenced itself (/api/v1/health answers 503 then)", set.Name)
	require.Equal(t, "0.0.0.0:9000", cfg.HTTPAddr)
	require.Equal(t, "/var/lib/cairn", cfg.DataDir)
	m, ok := mounted(c, cfg.DataDir)
	require.True(t, ok, "%s: the data dir is mounted", set.Name)
	require.True(t, slices.ContainsFunc(set.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == m.Name }),
		"%s: the data dir is on a persistent volume claim", set.Name)

	// Tokens and the cluster secret are read from the mounted secret's files.
	for _, v := range []string{cfg.AdminToken, cfg.WriteToken, cfg.ReadToken, cfg.ClusterSecret} {
		require.NotEmpty(t, v, "%s: tokens and the cluster secret come from the secret's files", set.Name)
	}

	var pdb *policyv1.PodDisruptionBudget
	for _, p := range o.pdbs {
		ps, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		require.NoError(t, err)
		if ps.Matches(podLabels) {
			pdb = &p
		}
	}
	require.NotNil(t, pdb, "%s: a disruption budget", set.Name)
	require.NotNil(t, pdb.Spec.MaxUnavailable)
	require.Equal(t, 1, pdb.Spec.MaxUnavailable.IntValue(), "%s: one pod away at a time", set.Name)
}

// TestKubernetesStrictDecode: the schema check refuses what the API would.
func TestKubernetesStrictDecode(t *testing.T) {
	doc := []byte("apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\nspec:\n  replica: 3\n")
	var v appsv1.StatefulSet
	require.Error(t, yaml.UnmarshalStrict(doc, &v), "a misspelt field")
	doc = bytes.Replace(doc, []byte("replica: 3"), []byte("replicas: three"), 1)
	require.Error(t, yaml.UnmarshalStrict(doc, &v), "a value of the wrong type")
}
