// Command dashboard-check reads Grafana dashboard JSON files against Grafana's own dashboard schema, as the
// Grafana Foundation SDK's generated types carry it (github.com/grafana/grafana-foundation-sdk/go): each file
// is decoded strictly (an unknown field, or a value of the wrong type, anywhere in the dashboard, its panels,
// their options, field config and Prometheus queries is an error naming its path) and then validated (the
// schema's constraints). One JSON line per file: {"file", "ok", "panels", "errors"}. Exit 1 when any file
// fails, 2 on bad arguments. The lab's own program (rackctl_lab/components/pins.py DASHBOARD_CHECK).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

type result struct {
	File   string   `json:"file"`
	OK     bool     `json:"ok"`
	Panels int      `json:"panels"`
	Errors []string `json:"errors"`
}

// messages is each error's "path: message"; none where err is nil or an empty cog.BuildErrors (the SDK's
// strict decoder returns its error list typed, empty when nothing was wrong).
func messages(err error) []string {
	if err == nil {
		return nil
	}
	var built cog.BuildErrors
	if errors.As(err, &built) {
		out := make([]string, 0, len(built))
		for _, one := range built {
			out = append(out, strings.TrimSpace(one.Error()))
		}
		return out
	}
	return []string{err.Error()}
}

func check(path string) result {
	out := result{File: path, Errors: []string{}}
	raw, err := os.ReadFile(path)
	if err != nil {
		out.Errors = []string{err.Error()}
		return out
	}
	var board dashboard.Dashboard
	if found := messages(board.UnmarshalJSONStrict(raw)); len(found) > 0 {
		out.Errors = found
		return out
	}
	out.Panels = len(board.Panels)
	if found := messages(board.Validate()); len(found) > 0 {
		out.Errors = found
		return out
	}
	out.OK = true
	return out
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dashboard-check DASHBOARD.json...")
		os.Exit(2)
	}
	plugins.RegisterDefaultPlugins() // the panel types' options and the datasources' queries, typed
	failed := false
	encoder := json.NewEncoder(os.Stdout)
	for _, path := range os.Args[1:] {
		res := check(path)
		failed = failed || !res.OK
		if err := encoder.Encode(res); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	if failed {
		os.Exit(1)
	}
}
