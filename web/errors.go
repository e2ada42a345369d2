package web

import (
	"github.com/cairn-db/cairn/models"
	"github.com/gin-gonic/gin"
)

// fail writes the JSON error envelope for err and stops the chain. Statuses
// and codes come from models.Codes, the binary's one table.
func fail(c *gin.Context, err error) {
	status, body := models.Envelope(err)
	c.AbortWithStatusJSON(status, body)
}

// StatusOf is the HTTP status an error answers with (metrics label their
// requests with it).
func StatusOf(err error) int {
	status, _ := models.StatusOf(err)
	return status
}
