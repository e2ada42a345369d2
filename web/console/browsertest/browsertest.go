// Package browsertest drives headless Chromium for the console's browser tests.
//
// Both the console's own tests (against a fake API) and the end-to-end tests
// (against a real cluster) render the console in a fresh Chromium; this package
// is the one place that knows how to start it, wait on the page and keep
// screenshots, so the two suites cannot drift apart.
package browsertest

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// Defaults suit the console against its fake API: the console polls once a
// second, so a wait longer than this is a bug, not a slow machine.
const (
	defaultTimeout      = 20 * time.Second
	defaultPollInterval = 25 * time.Millisecond
)

// Option tunes a Page.
type Option func(*Page)

// Timeout bounds every action, wait, evaluation and screenshot on the page.
func Timeout(d time.Duration) Option { return func(p *Page) { p.timeout = d } }

// PollInterval is how often WaitJS re-evaluates its expression.
func PollInterval(d time.Duration) Option { return func(p *Page) { p.pollInterval = d } }

// FinalScreenshot sets the suffix of the screenshot taken when the test ends
// (see Screenshot); the default is none.
func FinalScreenshot(suffix string) Option { return func(p *Page) { p.finalShot = suffix } }

// Page is one headless Chromium tab. Uncaught JavaScript exceptions and
// unhandled rejections fail the test even when the page happens to look right.
type Page struct {
	t            testing.TB
	ctx          context.Context
	artifacts    string // directory for PNG screenshots
	timeout      time.Duration
	pollInterval time.Duration
	finalShot    string

	mu         sync.Mutex
	exceptions []string
}

// chromiumPath is where CI installs Chromium; CAIRN_CHROMIUM overrides it.
func chromiumPath() string {
	if p := os.Getenv("CAIRN_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// New starts a fresh Chromium with its own profile and stops it when the test
// ends. It fails (never skips) when Chromium is missing: CI installs it, and a
// console that no test has rendered must not ship.
func New(t testing.TB, opts ...Option) *Page {
	t.Helper()
	path := chromiumPath()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("headless Chromium not found at %s (%v): install it (apt-get install -y chromium) or set CAIRN_CHROMIUM", path, err)
	}
	p := &Page{t: t, timeout: defaultTimeout, pollInterval: defaultPollInterval}
	for _, o := range opts {
		o(p)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
	)
	ctx, cancelCtx := chromedp.NewContext(actx)
	// The first action starts the browser; a timeout on it would end the
	// browser with it.
	require.NoError(t, chromedp.Do(ctx), "start Chromium at %s", path)
	p.ctx = ctx
	p.artifacts = os.Getenv("CAIRN_ARTIFACTS")
	if p.artifacts == "" {
		p.artifacts = t.TempDir()
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if m.IsException() {
				p.mu.Lock()
				p.exceptions = append(p.exceptions, m.String())
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
		<-done
	})
	// Cleanups run last-registered first: the final screenshot is taken
	// while the browser still runs, showing the page a failure left.
	t.Cleanup(func() { p.Screenshot(p.finalShot) })
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		require.Empty(t, p.exceptions, "JavaScript exceptions in the console")
	})
	return p
}

// Do runs chromedp actions on the page, failing the test on error.
func (p *Page) Do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	require.NoError(p.t, chromedp.Do(ctx, actions...))
}

// WaitJS waits until the JavaScript expression is truthy.
func (p *Page) WaitJS(expr string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	for {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr,
			chromedp.WithPollingInterval(p.pollInterval), chromedp.WithPollingTimeout(p.timeout)))
		// Right after a navigation chromedp may still hold the old page's
		// JavaScript context for a moment; the poll then runs again in the new one.
		if err != nil && strings.Contains(err.Error(), "Cannot find context with specified id") && ctx.Err() == nil {
			continue
		}
		require.NoError(p.t, err, "waiting for %s", expr)
		return
	}
}

// Eval evaluates a JavaScript expression on the page and decodes its value.
func Eval[T any](p *Page, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(p.t, err, "evaluating %s", expr)
	return v
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// Screenshot saves the page as <test name>[-suffix].png in $CAIRN_ARTIFACTS
// (default: the test's temp dir). A failed screenshot marks the test failed
// but does not stop it: it is evidence, not a check.
func (p *Page) Screenshot(suffix string) {
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Errorf("screenshot: %v", err)
		return
	}
	name := p.t.Name()
	if suffix != "" {
		name += "-" + suffix
	}
	file := filepath.Join(p.artifacts, unsafeName.ReplaceAllString(name, "_")+".png")
	if err := os.MkdirAll(p.artifacts, 0o755); err != nil {
		p.t.Errorf("screenshot dir: %v", err)
		return
	}
	if err := os.WriteFile(file, png, 0o644); err != nil {
		p.t.Errorf("write screenshot: %v", err)
		return
	}
	p.t.Logf("screenshot: %s", file)
}
