// Command lincheck checks histories recorded by the end-to-end harness (tests/e2e) for
// linearizability with Porcupine, against the model of a log in model.go: every append
// (acknowledged at an offset, refused, or of unknown outcome), read, tail and trim of each
// stream partition, recorded while faults were injected.
//
//	lincheck [-timeout 300s] [-viz DIR] [-mutants] [-json] HISTORY.jsonl...
//
// It prints one line per log and exits 0 only when every log is linearizable (1 for a
// violation, 2 when a log could not be decided in time, 3 for unusable input). With
// -mutants it also plants each anomaly of MutationKinds in a copy of each history and
// fails unless the check rejects every copy. With -json the last line of its output is the
// report as JSON (with the mutants' results).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// MutantReport says whether a planted anomaly was found.
type MutantReport struct {
	History string `json:"history"`
	Kind    string `json:"kind"`
	Planted string `json:"planted"`
	Caught  bool   `json:"caught"`
	Result  string `json:"result"`
}

// Output is what -json prints.
type Output struct {
	Histories map[string]Report `json:"histories"`
	Mutants   []MutantReport    `json:"mutants,omitempty"`
	OK        bool              `json:"ok"`
}

func main() {
	timeout := flag.Duration("timeout", 300*time.Second, "the longest the check of one log may take (then it is undecided, a failure)")
	vizDir := flag.String("viz", "", "draw every log that is not linearizable into this directory (HTML)")
	mutants := flag.Bool("mutants", false, "also check that each planted anomaly (lost, duplicate, reorder) is rejected")
	asJSON := flag.Bool("json", false, "print the report as JSON on the last line")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: lincheck [-timeout D] [-viz DIR] [-mutants] [-json] HISTORY.jsonl...")
		os.Exit(3)
	}
	out := Output{Histories: map[string]Report{}, OK: true}
	code := 0
	fail := func(c int) {
		out.OK = false
		if code == 0 || c < code {
			code = c
		}
	}
	for _, path := range flag.Args() {
		h, err := ReadHistoryFile(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "lincheck: %v\n", err)
			os.Exit(3)
		}
		rep := Check(h, *timeout, *vizDir)
		out.Histories[path] = rep
		printReport(path, rep)
		switch {
		case rep.Violations > 0:
			fail(1)
		case rep.Undecided > 0:
			fail(2)
		case len(rep.Logs) == 0:
			fmt.Printf("%s: no operation recorded\n", path)
			fail(3)
		}
		if !*mutants {
			continue
		}
		for _, kind := range MutationKinds {
			m, planted, err := Mutate(h, kind)
			mr := MutantReport{History: path, Kind: kind, Planted: planted}
			if err != nil {
				mr.Result = "not planted: " + err.Error()
			} else {
				mrep := Check(m, *timeout, "")
				mr.Caught = mrep.Violations > 0
				mr.Result = fmt.Sprintf("%d violation(s), %d undecided", mrep.Violations, mrep.Undecided)
			}
			verdict := "caught"
			if !mr.Caught {
				verdict = "NOT CAUGHT"
				fail(1)
			}
			fmt.Printf("%s: mutant %s: %s (%s): %s\n", path, kind, verdict, mr.Result, planted)
			out.Mutants = append(out.Mutants, mr)
		}
	}
	if *asJSON {
		text, _ := json.Marshal(out)
		fmt.Println(string(text))
	}
	os.Exit(code)
}

func printReport(path string, rep Report) {
	var faults []string
	for what, n := range rep.Faults {
		faults = append(faults, fmt.Sprintf("%s ×%d", what, n))
	}
	sort.Strings(faults)
	fmt.Printf("%s: %d operations on %d logs; faults: %s\n", path, rep.Ops, len(rep.Logs), strings.Join(faults, ", "))
	for _, l := range rep.Logs {
		fmt.Printf("  %-24s %-8s %6d ops: appends %d acked, unknown %d applied / %d not / %d undetermined, %d refused; "+
			"reads %d (%d entries); tails %d; trims %d (+%d unknown, %d refused); full coverage %v; marker regressions %d; %.2fs\n",
			l.Log, l.Result, l.Ops, l.AppendsOk, l.UnknownApplied, l.UnknownNotApplied, l.UnknownUndetermined, l.AppendsFailed,
			l.Reads, l.EntriesRead, l.Tails, l.Trims, l.TrimsUnknown, l.TrimsFailed, l.FullCoverage, l.MarkerRegressions, l.Seconds)
		if l.Diagnosis != "" {
			fmt.Printf("  %s\n", strings.ReplaceAll(l.Diagnosis, "\n", "\n  "))
		}
	}
	fmt.Printf("%s: %d violation(s), %d undecided\n", path, rep.Violations, rep.Undecided)
}
