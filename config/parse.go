package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

const (
	configFlag = "config"
	configEnv  = "CAIRN_CONFIG"
)

// Parse builds a Config from the node flags in args (no program name, no
// subcommand), the environment seen through lookupEnv (os.LookupEnv in
// production) and the TOML file named by --config or CAIRN_CONFIG.
// Precedence: flags, then env, then file, then defaults. Every value given in
// any source must be valid, even when a higher source overrides it: a broken
// file is reported rather than silently shadowed. An empty env var counts as
// unset. isTerminal picks the default log format.
//
// Errors are *UsageError, except for --help/-h, which writes the help text to
// usageOut and returns ErrHelp.
func Parse(args []string, lookupEnv func(string) (string, bool), isTerminal bool, usageOut io.Writer) (Config, error) {
	fs := flag.NewFlagSet("cairn", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// Every flag is a string so that values are parsed by the option table,
	// which produces one message format for flags, env and file.
	values := make(map[string]*string, len(options)+1)
	values[configFlag] = fs.String(configFlag, "", "")
	for _, o := range options {
		if o.kind == kindBool {
			v := new(string)
			fs.Var(boolText{v}, o.name, o.help)
			values[o.name] = v
			continue
		}
		values[o.name] = fs.String(o.name, "", o.help)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			Usage(usageOut)
			return Config{}, ErrHelp
		}
		return Config{}, &UsageError{Msg: err.Error()}
	}
	if fs.NArg() > 0 {
		return Config{}, &UsageError{Msg: fmt.Sprintf("unexpected argument %q: node settings are flags such as --role broker", fs.Arg(0))}
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })

	c := Default()
	if isTerminal {
		c.LogFormat = "console"
	}

	path := ""
	if explicit[configFlag] {
		path = *values[configFlag]
		if path == "" {
			return Config{}, &UsageError{Msg: `invalid --config "": want a file path`}
		}
	} else if v, ok := lookupEnv(configEnv); ok && v != "" {
		path = v
	}
	if path != "" {
		if err := applyFile(&c, path); err != nil {
			return Config{}, err
		}
		c.ConfigFile = path
	}

	for _, o := range options {
		if v, ok := lookupEnv(envName(o.name)); ok && v != "" {
			if err := o.set(&c, v); err != nil {
				return Config{}, source{kind: "env"}.invalid(o, v, err)
			}
		}
	}
	for _, o := range options {
		if explicit[o.name] {
			v := *values[o.name]
			if err := o.set(&c, v); err != nil {
				return Config{}, source{kind: "flag"}.invalid(o, v, err)
			}
			if o.secret && v != "" {
				c.SecretFlags = append(c.SecretFlags, o.name)
			}
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// applyFile reads a TOML file whose keys are the flag names.
func applyFile(c *Config, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return &UsageError{Msg: fmt.Sprintf("cannot read config file %s: %v", path, err)}
	}
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		return &UsageError{Msg: fmt.Sprintf("cannot parse config file %s: %v", path, err)}
	}
	// Sorted keys make the reported error the same on every run.
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	src := source{kind: "file", path: path}
	for _, k := range keys {
		o, ok := lookupOption(k)
		if !ok {
			return unknownKey(path, k)
		}
		text, err := tomlText(o, raw[k])
		if err != nil {
			return &UsageError{Msg: fmt.Sprintf("invalid %s in %s: %v", k, path, err)}
		}
		if err := o.set(c, text); err != nil {
			return src.invalid(o, text, err)
		}
	}
	return nil
}

func unknownKey(path, key string) error {
	msg := fmt.Sprintf("unknown key %q in config file %s", key, path)
	// A common slip is writing keys the Go or env way.
	guess := strings.ToLower(strings.ReplaceAll(key, "_", "-"))
	if _, ok := lookupOption(guess); ok {
		msg += fmt.Sprintf(" (did you mean %q?)", guess)
	}
	return &UsageError{Msg: msg}
}

// tomlText converts a TOML value to the text form the option parses.
func tomlText(o option, v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		if o.kind == kindBool {
			return strconv.FormatBool(v), nil
		}
	case int64:
		if o.kind == kindInt {
			return strconv.FormatInt(v, 10), nil
		}
	case []any:
		if o.kind == kindList {
			items := make([]string, 0, len(v))
			for _, item := range v {
				s, ok := item.(string)
				if !ok {
					return "", fmt.Errorf("want an array of strings, found %v", item)
				}
				items = append(items, s)
			}
			return strings.Join(items, ","), nil
		}
	}
	switch o.kind {
	case kindDuration:
		return "", fmt.Errorf("want a duration string such as \"3s\", found %v", v)
	case kindInt:
		return "", fmt.Errorf("want an integer, found %v", v)
	case kindList:
		return "", fmt.Errorf("want a string or an array of strings, found %v", v)
	case kindBool:
		return "", fmt.Errorf("want true or false, found %v", v)
	default:
		return "", fmt.Errorf("want a string, found %v", v)
	}
}

// boolText is a flag that may stand alone (--insecure means true); it
// keeps the text, which the option table parses like every other value.
type boolText struct{ v *string }

func (b boolText) String() string {
	if b.v == nil {
		return ""
	}
	return *b.v
}
func (b boolText) Set(s string) error { *b.v = s; return nil }
func (b boolText) IsBoolFlag() bool   { return true }
