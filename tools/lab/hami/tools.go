//go:build tools

// Package tools pins the commands the lab builds from this module (cgo: go-nvml loads libnvidia-ml.so.1 at run time).
package tools

import (
	_ "volcano.sh/k8s-device-plugin/cmd/vgpu"
	_ "volcano.sh/k8s-device-plugin/cmd/vgpu-monitor"
)
