package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// LogReport is what the check found for one log.
type LogReport struct {
	Log    string `json:"log"`
	Result string `json:"result"` // Ok, Illegal, Unknown (timed out)
	// Operations given to the linearizability checker.
	Ops int `json:"ops"`
	// Appends acknowledged with an offset.
	AppendsOk int `json:"appends_ok"`
	// Appends whose outcome was unknown and whose entry was read: they took effect.
	UnknownApplied int `json:"unknown_applied"`
	// Appends whose outcome was unknown, whose entry no read returned although the reads and
	// acknowledgements covered every offset of the log: they did not take effect, and are
	// left out.
	UnknownNotApplied int `json:"unknown_not_applied"`
	// Appends whose outcome was unknown and whose entry was not read, in a log with offsets
	// nobody read: checked as may-or-may-not-have-happened, taking effect only at such an
	// offset.
	UnknownUndetermined int `json:"unknown_undetermined"`
	// Appends refused (nothing written by the API's promise): left out, so an entry of one
	// that is read anyway has no append to explain it.
	AppendsFailed     int  `json:"appends_failed"`
	Reads             int  `json:"reads"`
	EntriesRead       int  `json:"entries_read"`
	Tails             int  `json:"tails"`
	Trims             int  `json:"trims"`
	TrimsUnknown      int  `json:"trims_unknown"`
	TrimsFailed       int  `json:"trims_failed"`
	FullCoverage      bool `json:"full_coverage"`
	MarkerRegressions int  `json:"marker_regressions"`
	// Why the log is not linearizable: the longest linearizable prefix found, the state
	// after it and the operations that could not follow.
	Diagnosis string  `json:"diagnosis,omitempty"`
	Seconds   float64 `json:"seconds"`
}

// Report is what the check found for a history.
type Report struct {
	Logs   []LogReport    `json:"logs"`
	Faults map[string]int `json:"faults"`
	Ops    int            `json:"ops"`
	// Logs that are not linearizable, plus markers that went backwards.
	Violations int `json:"violations"`
	// Logs the checker could not decide within the timeout.
	Undecided int `json:"undecided"`
}

// prepared is one log's history as porcupine operations, and the counts behind them.
type prepared struct {
	ops    []porcupine.Operation
	report LogReport
}

// prepare turns a log's records into operations. Appends refused are left out. An append
// whose outcome is unknown is an operation without a return (it may take effect at any time
// after its call); when a read returned its entry (values are unique per attempt), the
// offset it was read at is its answer, which keeps the search linear; when no read returned
// it and the reads covered every offset of the log, it did not take effect and is left out:
// an operation that may happen last and changes nothing anyone observed is equivalent to
// none. Otherwise it may have written one of the offsets nobody read (see freeOffsets).
func prepare(log string, records []Record) prepared {
	rep := LogReport{Log: log}
	observed := map[string]int64{}
	type span struct{ start, end int64 }
	var spans []span
	var maxEnd int64
	for _, r := range records {
		switch r.Op {
		case "read":
			for _, e := range r.Entries {
				if _, ok := observed[e.Value]; !ok {
					observed[e.Value] = e.Offset
				}
				spans = append(spans, span{e.Offset, e.Offset + e.Count})
				maxEnd = max64(maxEnd, e.Offset+e.Count)
			}
		case "append":
			if r.Outcome == "ok" {
				maxEnd = max64(maxEnd, *r.Offset+r.Count)
			}
		case "tail":
			maxEnd = max64(maxEnd, *r.Next)
		}
	}
	for _, r := range records {
		if r.Op == "append" && r.Outcome == "ok" {
			spans = append(spans, span{*r.Offset, *r.Offset + r.Count})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	free := &freeOffsets{}
	var covered int64
	for _, s := range spans {
		if s.start > covered {
			free.spans = append(free.spans, [2]int64{covered, s.start})
		}
		covered = max64(covered, s.end)
	}
	if covered < maxEnd {
		free.spans = append(free.spans, [2]int64{covered, maxEnd})
	}
	rep.FullCoverage = len(free.spans) == 0

	var ops []porcupine.Operation
	add := func(r Record, in input, out output, ret int64) {
		ops = append(ops, porcupine.Operation{ClientId: r.Client, Input: in, Call: r.Call, Output: out, Return: ret})
	}
	for _, r := range records {
		switch r.Op {
		case "append":
			in := input{kind: opAppend, value: r.Value, count: r.Count}
			switch r.Outcome {
			case "ok":
				rep.AppendsOk++
				add(r, in, output{offset: *r.Offset}, *r.Return)
			case "failed":
				rep.AppendsFailed++
			case "unknown":
				if offset, ok := observed[r.Value]; ok {
					rep.UnknownApplied++
					add(r, in, output{offset: offset}, math.MaxInt64)
				} else if rep.FullCoverage {
					rep.UnknownNotApplied++
				} else {
					rep.UnknownUndetermined++
					in.free = free
					add(r, in, output{unknown: true}, math.MaxInt64)
				}
			}
		case "read":
			rep.Reads++
			rep.EntriesRead += len(r.Entries)
			add(r, input{kind: opRead, from: *r.From}, output{marker: *r.Marker, entries: r.Entries, toEnd: r.ToEnd}, *r.Return)
		case "tail":
			rep.Tails++
			add(r, input{kind: opTail}, output{first: *r.First, next: *r.Next}, *r.Return)
		case "trim":
			in := input{kind: opTrim, through: *r.Through}
			switch r.Outcome {
			case "ok":
				rep.Trims++
				add(r, in, output{marker: *r.Marker}, *r.Return)
			case "failed":
				rep.TrimsFailed++
			case "unknown":
				rep.TrimsUnknown++
				add(r, in, output{unknown: true}, math.MaxInt64)
			}
		}
	}
	// Ranks of the undetermined appends by call (see input.rank), when all are one record.
	var undetermined []int
	for k, op := range ops {
		if in := op.Input.(input); in.free != nil {
			undetermined = append(undetermined, k)
		}
	}
	sort.SliceStable(undetermined, func(a, b int) bool { return ops[undetermined[a]].Call < ops[undetermined[b]].Call })
	for rank, k := range undetermined {
		in := ops[k].Input.(input)
		in.rank = rank
		for _, j := range undetermined {
			if ops[j].Input.(input).count != 1 {
				in.rank = -1
			}
		}
		ops[k].Input = in
	}
	rep.Ops = len(ops)
	rep.MarkerRegressions = markerRegressions(records)
	return prepared{ops: ops, report: rep}
}

// markerRegressions counts operations that observed a smaller trim marker than one an
// operation finished before them had observed: the marker only grows.
func markerRegressions(records []Record) int {
	type obs struct{ call, ret, marker int64 }
	var all []obs
	for _, r := range records {
		switch {
		case r.Op == "read":
			all = append(all, obs{r.Call, *r.Return, *r.Marker})
		case r.Op == "tail":
			all = append(all, obs{r.Call, *r.Return, *r.First})
		case r.Op == "trim" && r.Outcome == "ok":
			all = append(all, obs{r.Call, *r.Return, *r.Marker})
		}
	}
	byCall := append([]obs(nil), all...)
	sort.Slice(byCall, func(i, j int) bool { return byCall[i].call < byCall[j].call })
	byReturn := append([]obs(nil), all...)
	sort.Slice(byReturn, func(i, j int) bool { return byReturn[i].ret < byReturn[j].ret })
	regressions, done := 0, 0
	var seen int64
	for _, o := range byCall {
		for done < len(byReturn) && byReturn[done].ret < o.call {
			seen = max64(seen, byReturn[done].marker)
			done++
		}
		if o.marker < seen {
			regressions++
		}
	}
	return regressions
}

// Check checks every log of the history, each within timeout; with vizDir set, a log that
// is not linearizable is drawn to vizDir/<log>.html (porcupine's visualization).
func Check(h *History, timeout time.Duration, vizDir string) Report {
	byLog := map[string][]Record{}
	report := Report{Faults: map[string]int{}}
	for _, r := range h.Records {
		if r.Op == "fault" {
			report.Faults[r.What]++
			continue
		}
		byLog[r.Log] = append(byLog[r.Log], r)
	}
	for _, log := range h.Logs() {
		p := prepare(log, byLog[log])
		started := time.Now()
		result := porcupine.CheckOperationsTimeout(logModel, p.ops, timeout)
		p.report.Result = string(result)
		if result == porcupine.Illegal {
			p.report.Diagnosis = diagnose(p.ops, timeout, vizDir, log)
		}
		p.report.Seconds = time.Since(started).Seconds()
		report.Ops += p.report.Ops
		switch result {
		case porcupine.Illegal:
			report.Violations++
		case porcupine.Unknown:
			report.Undecided++
		}
		report.Violations += p.report.MarkerRegressions
		report.Logs = append(report.Logs, p.report)
	}
	return report
}

// diagnose describes where the search stopped: the last operations of the longest
// linearizable prefix, the state after it, and the first operations left.
func diagnose(ops []porcupine.Operation, timeout time.Duration, vizDir, log string) string {
	_, info := porcupine.CheckOperationsVerbose(logModel, ops, timeout)
	if vizDir != "" {
		name := strings.NewReplacer("/", "_", " ", "_").Replace(log) + ".html"
		path := filepath.Join(vizDir, name)
		if err := os.MkdirAll(vizDir, 0o755); err == nil {
			if err := porcupine.VisualizePath(logModel, info, path); err == nil {
				log = log + " (drawn in " + path + ")"
			}
		}
	}
	partials := info.PartialLinearizationsOperations()
	var longest []porcupine.Operation
	for _, p := range partials {
		for _, l := range p {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: the longest linearizable prefix has %d of %d operations", log, len(longest), len(ops))
	state := logModel.Init()
	for _, op := range longest {
		_, state = logModel.Step(state, op.Input, op.Output)
	}
	from := len(longest) - 3
	if from < 0 {
		from = 0
	}
	for _, op := range longest[from:] {
		fmt.Fprintf(&b, "\n  … %s  [client %d]", describeOperation(op.Input, op.Output), op.ClientId)
	}
	fmt.Fprintf(&b, "\n  state then: %s\n  none of the next operations can follow:", describeState(state))
	done := map[int64]map[int]bool{}
	for _, op := range longest {
		if done[op.Call] == nil {
			done[op.Call] = map[int]bool{}
		}
		done[op.Call][op.ClientId] = true
	}
	rest := []porcupine.Operation{}
	for _, op := range ops {
		if !done[op.Call][op.ClientId] {
			rest = append(rest, op)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Call < rest[j].Call })
	for i, op := range rest {
		if i == 4 {
			break
		}
		fmt.Fprintf(&b, "\n  ? %s  [client %d, call %d]", describeOperation(op.Input, op.Output), op.ClientId, op.Call)
	}
	return b.String()
}
