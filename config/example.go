package config

import (
	"fmt"
	"io"
	"strings"
)

// WriteExample writes an example config file: every key of the option
// table, grouped as in the help, each with its meaning, env var and default.
// Keys with a plain default are set to it, so the file parses to exactly the
// defaults; keys whose default is derived (advertise addresses, the node id,
// the log format) or secret stay commented out, since writing a value would
// pin what the node otherwise works out for itself.
func WriteExample(w io.Writer) error {
	var b strings.Builder
	b.WriteString(`# Cairn node configuration (TOML). Load it with: cairn --config cairn.toml
#
# Every key is also a flag (--key) and an environment variable (CAIRN_KEY,
# dashes as underscores). Flags beat environment variables, which beat this
# file, which beats the defaults. The values below are the defaults: change
# what you need and delete the rest if you like.
`)
	d := Default()
	for _, g := range groups {
		fmt.Fprintf(&b, "\n# ---- %s ----\n", g)
		for _, o := range options {
			if o.group != g {
				continue
			}
			fmt.Fprintf(&b, "\n# %s\n", o.help)
			if o.defText != "" {
				fmt.Fprintf(&b, "# (env %s; default: %s)\n# %s = %s\n", envName(o.name), o.defText, o.name, tomlExample(o))
				continue
			}
			fmt.Fprintf(&b, "# (env %s)\n%s = %s\n", envName(o.name), o.name, tomlValue(o, o.get(&d)))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// tomlValue renders an option's text form as a TOML value of its kind.
func tomlValue(o option, text string) string {
	switch o.kind {
	case kindInt, kindBool:
		return text
	case kindList:
		if strings.Contains(text, ",") {
			items := SplitList(text)
			for i, it := range items {
				items[i] = tomlString(it)
			}
			return "[" + strings.Join(items, ", ") + "]"
		}
	}
	return tomlString(text)
}

// tomlExample is a placeholder for a commented-out key.
func tomlExample(o option) string {
	switch o.kind {
	case kindInt:
		return "0"
	case kindBool:
		return "false"
	case kindList:
		return "[]"
	}
	return `""`
}

func tomlString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`).Replace(s) + `"`
}
