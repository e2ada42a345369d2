package app

import "net/http"

// consoleHandler serves the web console.
func consoleHandler() http.Handler { return nil }
