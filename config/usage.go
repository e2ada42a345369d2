package config

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Usage writes the operator help for `cairn [run] [flags]`: the subcommands,
// every node flag with its default, env var and meaning, and a three-node
// example on one machine.
func Usage(w io.Writer) {
	var b strings.Builder
	b.WriteString(`Cairn: metadata control plane and storage nodes for a sharded time-series database.

Usage:
  cairn [run] [--config FILE] [flags]    run a node (the default command)
  cairn backup  --out FILE  [conn]       logical backup of the namespace (versioned JSON)
  cairn restore --in FILE   [conn]       restore into an empty namespace (--force to
                                         overwrite); also accepts a node's local backup file
  cairn etcd-auth-setup --etcd-root-password-file FILE [conn]
                                         turn etcd's auth on: root, and a user and role
                                         limited to the namespace (see its --help)
  cairn simulate [--nodes N --shards P --replicas R --add-nodes K --remove-nodes K]
                                         placement what-if, prints one JSON object
  cairn config init [--out FILE]         write an example config file (every key,
                                         commented, at its default)
  cairn bench write [--url U --series N --senders C --batch B --fields MIX --duration D]
                                         write load generator (inch-like), prints one JSON
                                         line: points/s, latencies, server CPU/Mpt and RSS
  cairn health [--addr HOST:PORT]        probe a node's /api/v1/health (exit 0 when
                                         healthy): for container health checks
  cairn version                          print the version (also --version)
  cairn help                             this text; cairn COMMAND --help for a command

Every node flag is also an environment variable CAIRN_<FLAG> (dashes become
underscores, e.g. CAIRN_HTTP_ADDR) and a key of the TOML config file
(http-addr = "127.0.0.1:9000", lease-ttl = "3s", role = ["broker", "storage"]).
Flags beat environment variables, which beat the file, which beats the defaults.
An empty environment variable counts as unset.

  --config FILE
        TOML config file to load (env CAIRN_CONFIG; default: none)
`)
	for _, g := range groups {
		fmt.Fprintf(&b, "\n%s:\n", g)
		for _, o := range options {
			if o.group == g {
				writeOption(&b, o)
			}
		}
	}
	b.WriteString(`
Exit status: 0 after a clean stop, 1 on a runtime failure, 2 on a bad flag,
environment variable or config file (the message names the bad value).

Example: a three-node cluster on one machine, every node running every role
with its own etcd member, HTTP port and data directory:

  CLUSTER=n1=http://127.0.0.1:2380,n2=http://127.0.0.1:2382,n3=http://127.0.0.1:2384
  for i in 1 2 3; do
    cairn --role etcd,master,broker,storage --node-id n$i --data-dir ./data-n$i \
      --http-addr 127.0.0.1:900$i \
      --etcd-name n$i \
      --etcd-listen-client-url http://127.0.0.1:$((2377 + 2*i)) \
      --etcd-listen-peer-url http://127.0.0.1:$((2378 + 2*i)) \
      --etcd-initial-cluster $CLUSTER &
  done

Then register the storage cluster (standalone does this by itself) and create
a database, through any node:
  curl -H 'Content-Type: application/json' 127.0.0.1:9001/api/v1/storage-clusters -d '{"name":"default"}'
  curl -H 'Content-Type: application/json' 127.0.0.1:9001/api/v1/databases \
    -d '{"name":"metrics","num_shards":6,"replica_factor":3}'
`)
	_, _ = io.WriteString(w, b.String())
}

func writeOption(b *strings.Builder, o option) {
	meta := "VALUE"
	switch {
	case o.kind == kindList:
		meta = "LIST"
	case o.kind == kindDuration:
		meta = "DURATION"
	case o.kind == kindInt:
		meta = "N"
	case o.kind == kindBool:
		meta = ""
	case strings.HasSuffix(o.name, "-url"):
		meta = "URL"
	case strings.HasSuffix(o.name, "-addr"):
		meta = "HOST:PORT"
	case strings.HasSuffix(o.name, "-dir"):
		meta = "DIR"
	case o.group == groupTLS && o.name != "etcd-username" && !o.secret,
		strings.HasSuffix(o.name, "-file"), strings.HasPrefix(o.name, "tls-"):
		meta = "FILE"
	}
	def := o.defText
	if def == "" {
		d := Default()
		def = o.get(&d)
	}
	if meta != "" {
		meta = " " + meta
	}
	fmt.Fprintf(b, "  --%s%s\n        %s\n        (env %s; default: %s)\n", o.name, meta, o.help, envName(o.name), def)
}

// CommandUsage writes the help of a subcommand in the style of Usage: what
// it does, its synopsis, then each flag with its meaning and default (and
// its environment variable when env lists it).
func CommandUsage(w io.Writer, fs *flag.FlagSet, synopsis, about string, env ...string) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nUsage:\n  %s\n", strings.TrimSpace(about), synopsis)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		if n == 0 {
			b.WriteString("\nFlags:\n")
		}
		n++
		meta, help := flag.UnquoteUsage(f)
		switch meta {
		case "string":
			meta = "VALUE"
		case "int", "uint", "int64", "uint64":
			meta = "N"
		case "duration":
			meta = "DURATION"
		case "float":
			meta = "X"
		}
		if meta != "" {
			meta = " " + meta
		}
		def := f.DefValue
		switch {
		case def == "" || (meta == "" && def == "false"):
			def = "none"
			if meta == "" {
				def = "off"
			}
		}
		extra := "default: " + def
		if slices.Contains(env, f.Name) {
			extra = "env " + envName(f.Name) + "; " + extra
		}
		fmt.Fprintf(&b, "  --%s%s\n        %s\n        (%s)\n", f.Name, meta, help, extra)
	})
	_, _ = io.WriteString(w, b.String())
}
