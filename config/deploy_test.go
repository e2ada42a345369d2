// Package deploy holds the files that package Cairn for operators (the
// compose file, the Kubernetes manifests and the systemd unit; the
// Dockerfile is at the repository's root). Its tests check them without Docker or systemd running: docker
// build is not available where the tests run, so the Dockerfile is linted by
// parsing it, the compose file by parsing it and running every node's
// command line through Cairn's own config parser, the Kubernetes manifests
// against the Kubernetes API types (kubernetes_test.go), and the unit with
// systemd-analyze verify.
package config_test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cairn-db/cairn/config"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// instruction is one Dockerfile instruction with continuations joined.
type instruction struct {
	cmd  string // upper case
	args string
	line int
}

func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []instruction
	var cur strings.Builder
	start := 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if cur.Len() == 0 {
			start = n
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start})
		cur.Reset()
	}
	require.NoError(t, sc.Err())
	require.Zero(t, cur.Len(), "unterminated continuation at line %d", start)
	return out
}

var knownInstructions = []string{"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT",
	"VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}

// TestDockerfile: multi-stage (a Go build stage, a small runtime stage), the
// runtime runs as a non-root user with a data volume, exposes the API port,
// and checks its health through /api/v1/health with the binary itself.
func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(t, filepath.Join("..", "Dockerfile"))
	var stages [][]instruction
	for _, in := range ins {
		require.Contains(t, knownInstructions, in.cmd, "line %d: unknown instruction %s", in.line, in.cmd)
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		require.NotEmpty(t, stages, "line %d: %s before the first FROM", in.line, in.cmd)
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	require.GreaterOrEqual(t, len(stages), 2, "multi-stage build")

	build := stages[0]
	fromBuild := strings.Fields(build[0].args)
	require.Regexp(t, `^golang:\d+\.\d+`, fromBuild[0])
	require.Equal(t, []string{"AS", "build"}, []string{strings.ToUpper(fromBuild[1]), fromBuild[2]})
	gomod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	require.NoError(t, err)
	goVer := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	require.NotNil(t, goVer)
	require.True(t, strings.HasPrefix(fromBuild[0], "golang:"+string(goVer[1])), "build image %s does not match go.mod's go %s", fromBuild[0], goVer[1])
	builds := false
	for _, in := range build {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			builds = true
			require.Contains(t, in.args, "CGO_ENABLED=0", "the runtime image has no libc: the binary must be static")
			require.Contains(t, in.args, "./cmd/cairn")
			require.Contains(t, in.args, "-X main.version=", "the image's cairn --version tells its version")
		}
	}
	require.True(t, builds, "the build stage builds cairn")

	runtime := stages[len(stages)-1]
	base := strings.Fields(runtime[0].args)[0]
	require.Regexp(t, `^(gcr\.io/distroless/static|scratch|alpine)`, base, "a small runtime image")
	last := map[string]instruction{}
	for _, in := range runtime {
		last[in.cmd] = in
	}
	for _, need := range []string{"COPY", "USER", "VOLUME", "EXPOSE", "HEALTHCHECK", "ENTRYPOINT"} {
		require.Contains(t, last, need, "runtime stage lacks %s", need)
	}
	user := strings.SplitN(last["USER"].args, ":", 2)[0]
	require.NotContains(t, []string{"root", "0", ""}, user, "runs as root")
	require.Contains(t, last["VOLUME"].args, "/var/lib/cairn")
	require.Contains(t, strings.Fields(last["EXPOSE"].args), "9000")
	hc := last["HEALTHCHECK"].args
	require.Regexp(t, `CMD \["/usr/local/bin/cairn", "health"\]`, hc, "health check through `cairn health` (no shell in the image)")
	require.Contains(t, last["ENTRYPOINT"].args, "/usr/local/bin/cairn")
	copied := false
	for _, in := range runtime {
		if in.cmd == "COPY" && strings.Contains(in.args, "--from=build") && strings.Contains(in.args, "/usr/local/bin/cairn") {
			copied = true
		}
		if in.cmd == "ENV" {
			for _, kv := range strings.Fields(in.args) {
				if v, ok := strings.CutPrefix(kv, "CAIRN_DATA_DIR="); ok {
					require.Equal(t, "/var/lib/cairn", v, "the data dir is the volume")
				}
			}
		}
	}
	require.True(t, copied, "the runtime stage copies the binary from the build stage")
}

type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Hostname    string            `yaml:"hostname"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		Ports       []string          `yaml:"ports"`
		DependsOn   any               `yaml:"depends_on"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// TestCompose: three etcd members that agree on their initial cluster, two
// master+broker nodes and three storage nodes that all talk to those
// members; every node's command line is valid for Cairn's own parser; each
// node has its own data volume.
func TestCompose(t *testing.T) {
	data, err := os.ReadFile("../deploy/docker-compose.yml")
	require.NoError(t, err)
	var cf composeFile
	require.NoError(t, yaml.Unmarshal(data, &cf))

	roles := map[string][]string{}
	type member struct{ name, peer, client string }
	var members []member
	initial := map[string]bool{}
	var clients [][]string
	volumes := map[string]string{}
	for name, svc := range cf.Services {
		if svc.Image != "cairn:latest" {
			continue
		}
		require.Equal(t, name, svc.Hostname, "service %s: hostname", name)
		env := func(k string) (string, bool) { v, ok := svc.Environment[k]; return v, ok }
		c, err := config.Parse(svc.Command, env, false, io.Discard)
		require.NoError(t, err, "service %s: its command line is refused", name)
		role := strings.Join(c.Roles, ",")
		roles[role] = append(roles[role], name)
		require.Equal(t, "0.0.0.0:9000", c.HTTPAddr, "service %s listens for other containers", name)
		require.Equal(t, name+":9000", c.AdvertiseAddr, "service %s advertises its own name", name)
		require.Len(t, svc.Volumes, 1, "service %s: one data volume", name)
		vol, dir, _ := strings.Cut(svc.Volumes[0], ":")
		require.Equal(t, "/var/lib/cairn", dir, "service %s: the volume holds the image's data dir", name)
		require.Contains(t, cf.Volumes, vol, "service %s: volume %s is declared", name, vol)
		require.NotContains(t, volumes, vol, "services %s and %s share volume %s", name, volumes[vol], vol)
		volumes[vol] = name
		if c.HasRole(config.RoleEtcd) {
			require.Equal(t, "http://"+name+":2380", c.EtcdAdvertisePeerURL, "service %s", name)
			require.Equal(t, "http://"+name+":2379", c.EtcdAdvertiseClientURL, "service %s", name)
			members = append(members, member{c.EtcdName, c.EtcdAdvertisePeerURL, c.EtcdAdvertiseClientURL})
			for _, m := range strings.Split(c.EtcdInitialCluster, ",") {
				initial[m] = true
			}
			continue
		}
		clients = append(clients, c.EtcdEndpoints)
	}
	require.Len(t, roles["etcd"], 3, "etcd members: %v", roles)
	require.Len(t, roles["master,broker"], 2, "master+broker nodes: %v", roles)
	require.Len(t, roles["storage"], 3, "storage nodes: %v", roles)
	require.Len(t, roles, 3, "unexpected roles: %v", roles)

	var want, endpoints []string
	for _, m := range members {
		want = append(want, m.name+"="+m.peer)
		endpoints = append(endpoints, m.client)
	}
	var got []string
	for m := range initial {
		got = append(got, m)
	}
	require.ElementsMatch(t, want, got, "every member's --etcd-initial-cluster is exactly the three members")
	for _, eps := range clients {
		require.ElementsMatch(t, endpoints, eps, "a node's --etcd-endpoints are the members' client URLs")
	}
	for _, name := range roles["master,broker"] {
		require.NotEmpty(t, cf.Services[name].Ports, "broker %s publishes its API port", name)
	}
	init, ok := cf.Services["init"]
	require.True(t, ok, "an init service registers the storage cluster")
	require.Contains(t, strings.Join(init.Command, " "), "/api/v1/storage-clusters")
	require.Contains(t, strings.Join(init.Command, " "), `{"name":"default"}`)
}

// TestSystemdUnit: the unit passes systemd-analyze verify (when the tool is
// installed) without a single complaint, and runs cairn as its own user
// with a state directory, a clean SIGTERM stop and no restart loop on a bad
// config (exit status 2).
func TestSystemdUnit(t *testing.T) {
	data, err := os.ReadFile("../deploy/cairn.service")
	require.NoError(t, err)
	keys := map[string]string{}
	section := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "[") {
			section = strings.Trim(line, "[]")
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "not a key=value line: %s", line)
		keys[section+"."+k] = v
	}
	require.Equal(t, "/usr/local/bin/cairn --config /etc/cairn/cairn.toml", keys["Service.ExecStart"])
	require.Equal(t, "cairn", keys["Service.User"])
	require.Equal(t, "cairn", keys["Service.StateDirectory"])
	require.Equal(t, "SIGTERM", keys["Service.KillSignal"])
	require.Equal(t, "2", keys["Service.RestartPreventExitStatus"])
	require.Equal(t, "multi-user.target", keys["Install.WantedBy"])

	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Logf("systemd-analyze not installed: structure checked, verify not run")
		return
	}
	// verify needs ExecStart's program to exist: point it at this test
	// binary, which does.
	self, err := os.Executable()
	require.NoError(t, err)
	unit := filepath.Join(t.TempDir(), "cairn.service")
	require.NoError(t, os.WriteFile(unit, []byte(strings.Replace(string(data), "ExecStart=/usr/local/bin/cairn", "ExecStart="+self, 1)), 0o644))
	out, err := exec.Command(tool, "verify", unit).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Empty(t, strings.TrimSpace(string(out)), "systemd-analyze verify complains")
}

// TestExampleConfigIsCurrent: deploy/cairn.toml is what `cairn config init`
// writes today, so a new flag cannot be missing from the shipped example.
func TestExampleConfigIsCurrent(t *testing.T) {
	shipped, err := os.ReadFile("../deploy/cairn.toml")
	require.NoError(t, err)
	var now strings.Builder
	require.NoError(t, config.WriteExample(&now))
	require.Equal(t, now.String(), string(shipped), "regenerate with: go run ./cmd/cairn config init --out deploy/cairn.toml --force")
}
