//go:build tools

// Package tools pins the commands the lab builds from this module.
package tools

import (
	_ "volcano.sh/volcano/cmd/scheduler"
	_ "volcano.sh/volcano/cmd/controller-manager"
	_ "volcano.sh/volcano/cmd/webhook-manager"
)
