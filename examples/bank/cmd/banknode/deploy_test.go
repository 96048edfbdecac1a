package main

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ffgen/ffgen/examples/bank/internal/cli"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/cluster"
	"go.yaml.in/yaml/v3"
)

// deployDir holds the container build and the Kubernetes manifests.
const deployDir = "../../deploy"

// The parts of the Kubernetes objects the wiring depends on.
type (
	object struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Name   string            `yaml:"name"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec yaml.Node `yaml:"spec"`
	}
	selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	port struct {
		Name          string `yaml:"name"`
		Port          int    `yaml:"port"`
		ContainerPort int    `yaml:"containerPort"`
		Protocol      string `yaml:"protocol"`
	}
	serviceSpec struct {
		ClusterIP                string            `yaml:"clusterIP"`
		PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
		Selector                 map[string]string `yaml:"selector"`
		Ports                    []port            `yaml:"ports"`
	}
	envVar struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
			SecretKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	}
	probe struct {
		HTTPGet *struct {
			Path string    `yaml:"path"`
			Port yaml.Node `yaml:"port"`
		} `yaml:"httpGet"`
	}
	container struct {
		Name           string        `yaml:"name"`
		Command        []string      `yaml:"command"`
		Ports          []port        `yaml:"ports"`
		Env            []envVar      `yaml:"env"`
		ReadinessProbe *probe        `yaml:"readinessProbe"`
		LivenessProbe  *probe        `yaml:"livenessProbe"`
		VolumeMounts   []volumeMount `yaml:"volumeMounts"`
	}
	volumeMount struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	}
	claim struct {
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
	}
	podTemplate struct {
		Metadata struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec struct {
			Affinity struct {
				NodeAffinity struct {
					Required struct {
						Terms []struct {
							MatchExpressions []struct {
								Key    string   `yaml:"key"`
								Values []string `yaml:"values"`
							} `yaml:"matchExpressions"`
						} `yaml:"nodeSelectorTerms"`
					} `yaml:"requiredDuringSchedulingIgnoredDuringExecution"`
				} `yaml:"nodeAffinity"`
			} `yaml:"affinity"`
			TerminationGracePeriodSeconds *int        `yaml:"terminationGracePeriodSeconds"`
			Containers                    []container `yaml:"containers"`
		} `yaml:"spec"`
	}
	statefulSetSpec struct {
		ServiceName         string      `yaml:"serviceName"`
		PodManagementPolicy string      `yaml:"podManagementPolicy"`
		Selector            selector    `yaml:"selector"`
		Template            podTemplate `yaml:"template"`
		Claims              []claim     `yaml:"volumeClaimTemplates"`
	}
	jobSpec struct {
		Template podTemplate `yaml:"template"`
	}
	pdbSpec struct {
		MaxUnavailable int      `yaml:"maxUnavailable"`
		Selector       selector `yaml:"selector"`
	}
	networkPolicySpec struct {
		PodSelector selector `yaml:"podSelector"`
		Ingress     []struct {
			From []struct {
				PodSelector *selector `yaml:"podSelector"`
			} `yaml:"from"`
			Ports []struct {
				Port     int    `yaml:"port"`
				Protocol string `yaml:"protocol"`
			} `yaml:"ports"`
		} `yaml:"ingress"`
	}
)

// manifests loads every object of every YAML file in the k8s directory,
// failing on unknown fields in the parts the test reads.
func manifests(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployDir, "k8s", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s/k8s: %v", deployDir, err)
	}
	var out []object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var o object
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.Kind == "" {
				t.Fatalf("%s: an object without a kind", f)
			}
			out = append(out, o)
		}
	}
	return out
}

func decodeSpec[T any](t *testing.T, o object) T {
	t.Helper()
	var v T
	if err := o.Spec.Decode(&v); err != nil {
		t.Fatalf("%s %s: %v", o.Kind, o.Metadata.Name, err)
	}
	return v
}

func ofKind(objs []object, kind string) []object {
	return slices.DeleteFunc(slices.Clone(objs), func(o object) bool { return o.Kind != kind })
}

// matches reports whether labels satisfy a selector's matchLabels.
func matches(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// podEnv resolves a container's environment as the kubelet would for a pod
// named pod with the template's labels: field references, secrets (test
// values) and $(VAR) references to variables defined before.
func podEnv(t *testing.T, c container, pod string, labels map[string]string, secrets map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		switch {
		case e.ValueFrom == nil:
			v = varRef.ReplaceAllStringFunc(v, func(ref string) string {
				name := varRef.FindStringSubmatch(ref)[1]
				val, ok := env[name]
				if !ok {
					t.Errorf("%s: %s refers to %s, which is not defined before it", c.Name, e.Name, name)
				}
				return val
			})
		case e.ValueFrom.FieldRef != nil:
			switch p := e.ValueFrom.FieldRef.FieldPath; {
			case p == "metadata.name":
				v = pod
			case p == "status.podIP":
				v = "10.1.2.3"
			case strings.HasPrefix(p, "metadata.labels['"):
				key := strings.TrimSuffix(strings.TrimPrefix(p, "metadata.labels['"), "']")
				var ok bool
				if v, ok = labels[key]; !ok {
					t.Errorf("%s: %s reads label %q, which the pod does not have", c.Name, e.Name, key)
				}
			default:
				t.Errorf("%s: %s: field %q not understood by this test", c.Name, e.Name, p)
			}
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
			var ok bool
			if v, ok = secrets[ref]; !ok {
				t.Errorf("%s: %s reads secret %s, which the manifests' instructions do not create", c.Name, e.Name, ref)
			}
		default:
			t.Errorf("%s: %s: a valueFrom this test does not understand", c.Name, e.Name)
		}
		if _, dup := env[e.Name]; dup {
			t.Errorf("%s: %s set twice", c.Name, e.Name)
		}
		env[e.Name] = v
	}
	return env
}

// settingsEnvs are the variables runtime.SettingsFromEnv reads.
var settingsEnvs = []string{
	runtime.EnvGroups, runtime.EnvHeartbeatInterval, runtime.EnvHeartbeatTimeout, runtime.EnvAttemptTimeout,
	runtime.EnvOperationTimeout, runtime.EnvMaxFailovers, runtime.EnvSuspectFor,
	runtime.EnvBudgetRate, runtime.EnvBudgetBurst, runtime.EnvBudgetWait,
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// containerPort returns the number of the named container port with the
// protocol (TCP if empty).
func containerPort(c container, name, proto string) int {
	for _, p := range c.Ports {
		if p.Name == name && (p.Protocol == proto || p.Protocol == "" && proto == "TCP") {
			return p.ContainerPort
		}
	}
	return 0
}

// probePort resolves a probe's port, a number or a container port name.
func probePort(c container, n yaml.Node) int {
	if p, err := strconv.Atoi(n.Value); err == nil {
		return p
	}
	return containerPort(c, n.Value, "TCP")
}

// The manifests configure banknode the way its flags understand: every
// variable is one of its flags' or a runtime setting, the values pass the
// checks banknode makes at start, and ports, probes, seeds, the drain and
// the failure groups agree with them and with each other.
func TestDeployManifestsMatchBanknode(t *testing.T) {
	objs := manifests(t)
	secrets := map[string]string{
		"bank-secrets/manage-token": "test-token",
		"bank-secrets/gossip-key":   base64.StdEncoding.EncodeToString(make([]byte, 32)),
	}
	services := ofKind(objs, "Service")
	if len(services) != 1 {
		t.Fatalf("%d services, want the one headless service", len(services))
	}
	svcName := services[0].Metadata.Name
	svc := decodeSpec[serviceSpec](t, services[0])
	if svc.ClusterIP != "None" || !svc.PublishNotReadyAddresses {
		t.Errorf("service %s: clusterIP %q, publishNotReadyAddresses %v; want a headless service that publishes pods before they are ready (readiness needs gossip first)",
			svcName, svc.ClusterIP, svc.PublishNotReadyAddresses)
	}
	svcPort := func(name string) int {
		for _, p := range svc.Ports {
			if p.Name == name {
				return p.Port
			}
		}
		t.Errorf("service %s has no port named %s", svcName, name)
		return 0
	}
	pdbs := ofKind(objs, "PodDisruptionBudget")
	policies := ofKind(objs, "NetworkPolicy")

	sets := ofKind(objs, "StatefulSet")
	if len(sets) < 2 {
		t.Fatalf("%d StatefulSets, want one per failure group, at least two", len(sets))
	}
	var groupsSeen []string
	var groupsEnv, expose string
	for _, o := range sets {
		name := o.Metadata.Name
		ss := decodeSpec[statefulSetSpec](t, o)
		labels := ss.Template.Metadata.Labels
		if ss.ServiceName != svcName || ss.PodManagementPolicy != "Parallel" {
			t.Errorf("%s: serviceName %q, podManagementPolicy %q; want %s and Parallel (no pod can be ready before the other groups' pods run)",
				name, ss.ServiceName, ss.PodManagementPolicy, svcName)
		}
		if !matches(ss.Selector.MatchLabels, labels) || !matches(svc.Selector, labels) {
			t.Errorf("%s: pods labelled %v escape its selector %v or the service's %v", name, labels, ss.Selector.MatchLabels, svc.Selector)
		}
		if !slices.ContainsFunc(pdbs, func(p object) bool {
			s := decodeSpec[pdbSpec](t, p)
			return s.MaxUnavailable == 1 && matches(s.Selector.MatchLabels, labels)
		}) {
			t.Errorf("%s: no PodDisruptionBudget with maxUnavailable 1 covers its pods", name)
		}
		i := slices.IndexFunc(ss.Template.Spec.Containers, func(c container) bool { return c.Name == "banknode" })
		if i < 0 {
			t.Fatalf("%s: no banknode container", name)
		}
		c := ss.Template.Spec.Containers[i]
		env := podEnv(t, c, name+"-0", labels, secrets)

		// banknode accepts the configuration, as it would at start.
		for k, v := range env {
			t.Setenv(k, v)
		}
		f := cli.NewFlags("banknode", "")
		parsed := defineFlags(f)
		if err := f.Parse(nil); err != nil || len(f.Errs) > 0 {
			t.Fatalf("%s: flags from the environment: %v %v", name, err, f.Errs)
		}
		cfg := parsed()
		p, err := prepare(cfg)
		if err != nil {
			t.Fatalf("%s: banknode would refuse to start: %v", name, err)
		}

		// The replicated state is on the pod's own volume claim, which
		// outlives the pod: a restarted pod, or a whole cluster, keeps
		// every acknowledged write.
		if cfg.dataDir == "" {
			t.Errorf("%s: no -data-dir: a cluster restarted at once would start empty", name)
		}
		mounted := slices.ContainsFunc(c.VolumeMounts, func(m volumeMount) bool {
			return m.MountPath == cfg.dataDir && slices.ContainsFunc(ss.Claims, func(cl claim) bool { return cl.Metadata.Name == m.Name })
		})
		if !mounted {
			t.Errorf("%s: -data-dir %q is not a volume from the StatefulSet's volumeClaimTemplates", name, cfg.dataDir)
		}

		// Every variable is banknode's or the runtime's, or only feeds
		// another one: a misspelt name would be ignored silently.
		known := append(slices.Collect(maps.Values(f.Envs)), settingsEnvs...)
		for _, e := range c.Env {
			feeds := slices.ContainsFunc(c.Env, func(o envVar) bool { return strings.Contains(o.Value, "$("+e.Name+")") })
			if !slices.Contains(known, e.Name) && !feeds {
				t.Errorf("%s: %s is neither a banknode flag's variable nor a runtime setting", name, e.Name)
			}
		}

		// The failure group is the zone the pods are pinned to.
		var zones []string
		for _, term := range ss.Template.Spec.Affinity.NodeAffinity.Required.Terms {
			for _, ex := range term.MatchExpressions {
				if ex.Key == "topology.kubernetes.io/zone" {
					zones = append(zones, ex.Values...)
				}
			}
		}
		if !slices.Equal(zones, []string{cfg.group}) {
			t.Errorf("%s: group %q, pinned to zones %v; want the one zone of its group", name, cfg.group, zones)
		}
		if slices.Contains(groupsSeen, cfg.group) {
			t.Errorf("%s: group %q has a StatefulSet already", name, cfg.group)
		}
		groupsSeen = append(groupsSeen, cfg.group)
		if groupsEnv != "" && env[runtime.EnvGroups] != groupsEnv {
			t.Errorf("%s: %s=%q, another StatefulSet says %q", name, runtime.EnvGroups, env[runtime.EnvGroups], groupsEnv)
		}
		groupsEnv = env[runtime.EnvGroups]

		// Ports: the container's, the service's and the addresses agree.
		rpc, gossip, mgmt := portOf(t, cfg.rpc), portOf(t, cfg.gossip), portOf(t, cfg.mgmt)
		expose = fmt.Sprintf("EXPOSE %d %d %d/udp %d", rpc, gossip, gossip, mgmt)
		for _, w := range []struct {
			name, proto string
			want        int
		}{{"rpc", "TCP", rpc}, {"gossip", "TCP", gossip}, {"gossip-udp", "UDP", gossip}, {"mgmt", "TCP", mgmt}} {
			if got := containerPort(c, w.name, w.proto); got != w.want {
				t.Errorf("%s: container port %s/%s = %d, banknode listens on %d", name, w.name, w.proto, got, w.want)
			}
			if got := svcPort(w.name); got != w.want {
				t.Errorf("%s: service port %s = %d, banknode listens on %d", name, w.name, got, w.want)
			}
		}
		if adv := portOf(t, cfg.advertise); adv != rpc || p.cluster.AdvertiseAddr != "10.1.2.3" {
			t.Errorf("%s: publishes rpc %s and gossip %s; want the pod's IP and the ports it listens on", name, cfg.advertise, p.cluster.AdvertiseAddr)
		}

		// Seeds: the headless service's gossip port, through DNS.
		for _, seed := range p.cluster.Seeds {
			if seed != "dnssrv+_gossip._tcp."+svcName && seed != "dns+"+svcName+":"+strconv.Itoa(gossip) {
				t.Errorf("%s: seed %q is not the headless service %s's gossip port", name, seed, svcName)
			}
		}
		if len(p.cluster.Seeds) == 0 {
			t.Errorf("%s: no seeds", name)
		}

		// Probes reach the health routes without the token.
		for _, pr := range []struct {
			kind  string
			probe *probe
			path  string
		}{{"readiness", c.ReadinessProbe, "/health/ready"}, {"liveness", c.LivenessProbe, "/health/alive"}} {
			if pr.probe == nil || pr.probe.HTTPGet == nil || pr.probe.HTTPGet.Path != pr.path || probePort(c, pr.probe.HTTPGet.Port) != mgmt {
				got := "none"
				if pr.probe != nil && pr.probe.HTTPGet != nil {
					got = fmt.Sprintf("GET %s on port %d", pr.probe.HTTPGet.Path, probePort(c, pr.probe.HTTPGet.Port))
				}
				t.Errorf("%s: %s probe: %s; want GET %s on the management port %d", name, pr.kind, got, pr.path, mgmt)
			}
		}
		if cfg.token != "" && !cfg.healthPublic {
			t.Errorf("%s: the management API needs a token and the probes cannot send one: set FFGEN_HEALTH_PUBLIC", name)
		}

		// SIGTERM: leave (two steps of up to DefaultLeaveTimeout), then the
		// drain, well inside the grace period.
		need := 2*cluster.DefaultLeaveTimeout + cfg.drain + 5*time.Second
		grace := 30 * time.Second // Kubernetes' default
		if g := ss.Template.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = time.Duration(*g) * time.Second
		}
		if grace < need {
			t.Errorf("%s: termination grace period %v, want at least %v (leave, then a drain of %v)", name, grace, need, cfg.drain)
		}

		// Plaintext RPC only behind a policy that admits the bank's pods.
		if cfg.plaintext && !slices.ContainsFunc(policies, func(o object) bool {
			np := decodeSpec[networkPolicySpec](t, o)
			if !matches(np.PodSelector.MatchLabels, labels) {
				return false
			}
			for _, in := range np.Ingress {
				if slices.ContainsFunc(in.Ports, func(p struct {
					Port     int    `yaml:"port"`
					Protocol string `yaml:"protocol"`
				}) bool {
					return p.Port == rpc
				}) {
					return len(in.From) > 0 && !slices.ContainsFunc(in.From, func(f struct {
						PodSelector *selector `yaml:"podSelector"`
					}) bool {
						return f.PodSelector == nil
					})
				}
			}
			return false
		}) {
			t.Errorf("%s: plaintext RPC without a NetworkPolicy that limits port %d to the bank's pods", name, rpc)
		}
	}
	slices.Sort(groupsSeen)
	if all := slices.Sorted(slices.Values(cli.List(groupsEnv))); !slices.Equal(all, groupsSeen) {
		t.Errorf("%s=%q, StatefulSets for %v: want one per group", runtime.EnvGroups, groupsEnv, groupsSeen)
	}

	// bankload follows the nodes through the service's management port
	// with the same token and groups.
	jobs := ofKind(objs, "Job")
	if len(jobs) != 1 {
		t.Fatalf("%d jobs, want bankload", len(jobs))
	}
	job := decodeSpec[jobSpec](t, jobs[0])
	load := job.Template.Spec.Containers[0]
	lenv := podEnv(t, load, "bankload", job.Template.Metadata.Labels, secrets)
	if lenv["FFGEN_MANAGEMENT_ADDRS"] != "dnssrv+_mgmt._tcp."+svcName || svcPort("mgmt") == 0 {
		t.Errorf("bankload: FFGEN_MANAGEMENT_ADDRS=%q, want the SRV name of %s's mgmt port", lenv["FFGEN_MANAGEMENT_ADDRS"], svcName)
	}
	if lenv[cli.ManageTokenEnv] != secrets["bank-secrets/manage-token"] || lenv[runtime.EnvGroups] != groupsEnv {
		t.Errorf("bankload: token or groups differ from the nodes': %v", lenv)
	}
	if len(load.Command) != 1 || !strings.HasSuffix(load.Command[0], "/bankload") {
		t.Errorf("bankload: command %v", load.Command)
	}
	if strings.Contains(strings.Join(slices.Collect(maps.Keys(lenv)), ","), "GOSSIP") {
		t.Errorf("bankload: gossip settings %v, but it is a thin client", lenv)
	}

	// The image holds both commands where the manifests run them and
	// exposes the ports the nodes listen on.
	docker, err := os.ReadFile(filepath.Join(deployDir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"./examples/bank/cmd/banknode", "./examples/bank/cmd/bankload", "/usr/local/bin/",
		`ENTRYPOINT ["/usr/local/bin/banknode"]`, expose, "USER nonroot",
	} {
		if !bytes.Contains(docker, []byte(want)) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if load.Command[0] != "/usr/local/bin/bankload" {
		t.Errorf("bankload runs %s, the image has /usr/local/bin/bankload", load.Command[0])
	}
}
