package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The checks below return only the reason a value is wrong; the caller adds
// where the value came from (flag, env var or file key) and the value itself,
// so one check serves every source.

var namespaceRE = regexp.MustCompile(`^/[A-Za-z0-9_./-]+$`)

func checkName(s string) error {
	if !ValidName(s) {
		return errors.New("want 1 to 64 letters, digits, '_' or '-'")
	}
	return nil
}

func checkNonEmpty(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	return nil
}

func checkOneOf(values ...string) func(string) error {
	return func(s string) error {
		for _, v := range values {
			if s == v {
				return nil
			}
		}
		return fmt.Errorf("want one of %s", strings.Join(values, ", "))
	}
}

// checkHostPort accepts what net.Listen accepts for TCP, with a numeric port.
func checkHostPort(s string) (host string, err error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return "", errors.New(ae.Err)
		}
		return "", err
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "", errors.New("port must be a number from 0 to 65535")
	}
	return host, nil
}

func checkAddr(s string) error {
	_, err := checkHostPort(s)
	return err
}

// checkAdvertiseAddr also refuses addresses no other node could dial.
func checkAdvertiseAddr(s string) error {
	host, err := checkHostPort(s)
	if err != nil {
		return err
	}
	if isUnspecifiedHost(host) {
		return errors.New("host must be an address other nodes can dial, not empty or 0.0.0.0")
	}
	return nil
}

func isUnspecifiedHost(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// checkURL accepts the URLs etcd accepts for listening and dialing:
// http or https, host:port, no path.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return ue.Err
		}
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("want an http:// or https:// URL")
	}
	if u.Host == "" {
		return errors.New("URL has no host:port")
	}
	if _, err := checkHostPort(u.Host); err != nil {
		return fmt.Errorf("URL host: %w", err)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return errors.New("URL must be scheme://host:port only")
	}
	return nil
}

func checkURLList(list []string) error {
	if len(list) == 0 {
		return errors.New("want at least one URL")
	}
	for _, s := range list {
		if err := checkURL(s); err != nil {
			return fmt.Errorf("%q: %w", s, err)
		}
	}
	return nil
}

func checkNamespace(s string) error {
	if !namespaceRE.MatchString(s) {
		return errors.New("want an etcd key prefix like /cairn: a leading '/', then letters, digits, '_', '.', '-' or '/'")
	}
	if strings.HasSuffix(s, "/") {
		return errors.New("must not end with '/'")
	}
	if strings.Contains(s, "//") {
		return errors.New("must not contain an empty segment '//'")
	}
	return nil
}

// parseInitialCluster checks an etcd --initial-cluster value and returns its
// member names.
func parseInitialCluster(s string) ([]string, error) {
	var names []string
	for _, m := range SplitList(s) {
		name, u, ok := strings.Cut(m, "=")
		if !ok {
			return nil, fmt.Errorf("member %q: want name=peer-url", m)
		}
		if err := checkName(name); err != nil {
			return nil, fmt.Errorf("member name %q: %w", name, err)
		}
		if err := checkURL(u); err != nil {
			return nil, fmt.Errorf("member %q: %w", name, err)
		}
		if slices.Contains(names, name) {
			return nil, fmt.Errorf("member %q listed twice", name)
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, errors.New("want a comma list of name=peer-url")
	}
	return names, nil
}

func parseDuration(s string, minimum time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("want a duration such as 3s, 500ms or 1m")
	}
	if d < minimum {
		return 0, fmt.Errorf("must be at least %s", minimum)
	}
	return d, nil
}

// SplitList splits a comma list, trimming blanks and dropping empty items so
// a trailing comma is harmless.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
