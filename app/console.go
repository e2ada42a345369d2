package app

import (
	"net/http"

	"github.com/cairn-db/cairn/web/console"
)

// consoleHandler serves the web console embedded in the binary.
func consoleHandler() http.Handler { return console.Handler() }
