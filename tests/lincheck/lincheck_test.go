package main

import (
	"bytes"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"
)

const testTimeout = 60 * time.Second

func ret(t int64) *int64 { return &t }

func appendOK(client int, call, retT int64, value string, offset int64) Record {
	return Record{Client: client, Log: "s/0", Call: call, Return: ret(retT), Op: "append", Value: value, Count: 1, Outcome: "ok", Offset: i64(offset)}
}

func appendUnknown(client int, call int64, value string) Record {
	return Record{Client: client, Log: "s/0", Call: call, Op: "append", Value: value, Count: 1, Outcome: "unknown"}
}

func read(client int, call, retT, from, marker int64, toEnd bool, values ...string) Record {
	r := Record{Client: client, Log: "s/0", Call: call, Return: ret(retT), Op: "read", From: i64(from), Marker: i64(marker), ToEnd: toEnd}
	start := max64(from, marker)
	for i, v := range values {
		r.Entries = append(r.Entries, ReadItem{Offset: start + int64(i), Count: 1, Value: v})
	}
	return r
}

func check(t *testing.T, records ...Record) Report {
	t.Helper()
	// Through the file format, as the harness writes it.
	var buf bytes.Buffer
	if err := WriteHistory(&buf, records); err != nil {
		t.Fatal(err)
	}
	h, err := ReadHistory(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return Check(h, testTimeout, "")
}

func TestASequentialHistoryIsLinearizable(t *testing.T) {
	rep := check(t,
		appendOK(0, 0, 10, "a", 0),
		appendOK(0, 11, 20, "b", 1),
		read(1, 21, 30, 0, 0, false, "a", "b"),
		Record{Client: 1, Log: "s/0", Call: 31, Return: ret(40), Op: "tail", First: i64(0), Next: i64(2)},
		Record{Client: 2, Log: "s/0", Call: 41, Return: ret(50), Op: "trim", Through: i64(0), Outcome: "ok", Marker: i64(1)},
		read(1, 51, 60, 0, 1, true, "b"),
	)
	if rep.Violations != 0 || rep.Undecided != 0 {
		t.Fatalf("%+v", rep)
	}
}

func TestConcurrentAppendsMayTakeEitherOrder(t *testing.T) {
	rep := check(t,
		appendOK(0, 0, 10, "a", 1),
		appendOK(1, 2, 8, "b", 0),
		read(2, 11, 12, 0, 0, true, "b", "a"),
	)
	if rep.Violations != 0 {
		t.Fatalf("%+v", rep)
	}
}

func TestUnknownAppendsMayOrMayNotHaveHappened(t *testing.T) {
	// "x" took effect (read at 1) after its client gave up; "y" did not, and every offset
	// was read, so it is left out.
	rep := check(t,
		appendOK(0, 0, 10, "a", 0),
		appendUnknown(1, 5, "x"),
		appendUnknown(1, 12, "y"),
		appendOK(0, 20, 30, "b", 2),
		read(2, 31, 40, 0, 0, true, "a", "x", "b"),
	)
	l := rep.Logs[0]
	if rep.Violations != 0 || l.UnknownApplied != 1 || l.UnknownNotApplied != 1 || !l.FullCoverage {
		t.Fatalf("%+v", rep)
	}
	// Nobody read offset 1: "y" (or "z") may have written it, so it stays undetermined.
	rep = check(t,
		appendOK(0, 0, 10, "a", 0),
		appendUnknown(1, 12, "y"),
		appendUnknown(1, 13, "z"),
		appendOK(0, 20, 30, "b", 2),
		read(2, 31, 40, 2, 0, true, "b"),
	)
	if l := rep.Logs[0]; rep.Violations != 0 || l.UnknownUndetermined != 2 || l.FullCoverage {
		t.Fatalf("%+v", rep)
	}
	// But an offset nobody read with no append that may have written it is a hole.
	rep = check(t,
		appendOK(0, 0, 10, "a", 0),
		appendOK(0, 20, 30, "b", 2),
		appendUnknown(1, 31, "y"),
		read(2, 31, 40, 2, 0, true, "b"),
	)
	if rep.Violations == 0 {
		t.Fatalf("a hole at offset 1 before the only unknown append was called: %+v", rep)
	}
}

func TestAnomaliesAreViolations(t *testing.T) {
	cases := map[string][]Record{
		"a read after an acknowledgement misses the entry": {
			appendOK(0, 0, 10, "a", 0),
			read(1, 20, 30, 0, 0, false),
		},
		"an entry of a refused append is read": {
			{Client: 0, Log: "s/0", Call: 0, Return: ret(5), Op: "append", Value: "a", Count: 1, Outcome: "failed"},
			read(1, 20, 30, 0, 0, false, "a"),
		},
		"an acknowledged entry is lost": {
			appendOK(0, 0, 10, "a", 0),
			appendOK(0, 11, 20, "b", 1),
			read(1, 21, 30, 0, 0, true, "b"),
		},
		"an entry is read twice": {
			appendOK(0, 0, 10, "a", 0),
			read(1, 21, 30, 0, 0, true, "a", "a"),
		},
		"entries are reordered": {
			appendOK(0, 0, 10, "a", 0),
			appendOK(0, 11, 20, "b", 1),
			read(1, 21, 30, 0, 0, true, "b", "a"),
		},
		"acknowledged offsets out of real-time order": {
			appendOK(0, 0, 10, "a", 1),
			appendOK(0, 11, 20, "b", 0),
		},
		"a tail behind an acknowledged append": {
			appendOK(0, 0, 10, "a", 0),
			{Client: 1, Log: "s/0", Call: 11, Return: ret(20), Op: "tail", First: i64(0), Next: i64(0)},
		},
		"a trim marker no trim stored": {
			appendOK(0, 0, 10, "a", 0),
			appendOK(0, 11, 20, "b", 1),
			read(1, 21, 30, 0, 1, false, "b"),
		},
		"a trim beyond what it asked for": {
			appendOK(0, 0, 10, "a", 0),
			appendOK(0, 11, 20, "b", 1),
			{Client: 1, Log: "s/0", Call: 21, Return: ret(30), Op: "trim", Through: i64(0), Outcome: "ok", Marker: i64(2)},
		},
		"the trim marker goes backwards": {
			appendOK(0, 0, 10, "a", 0),
			appendOK(0, 11, 20, "b", 1),
			{Client: 1, Log: "s/0", Call: 21, Return: ret(30), Op: "trim", Through: i64(0), Outcome: "ok", Marker: i64(1)},
			read(1, 31, 40, 0, 0, false, "a", "b"),
		},
	}
	for name, records := range cases {
		if rep := check(t, records...); rep.Violations == 0 {
			t.Errorf("%s: not found: %+v", name, rep)
		}
	}
}

func TestADiagnosisNamesTheOperationsThatCannotFollow(t *testing.T) {
	rep := check(t,
		appendOK(0, 0, 10, "a", 0),
		appendOK(0, 11, 20, "b", 1),
		read(1, 21, 30, 0, 0, true, "b", "a"),
	)
	d := rep.Logs[0].Diagnosis
	if !strings.Contains(d, "read(0) B=0 -> [0:b 1:a]") || !strings.Contains(d, "state then: end 2") {
		t.Fatalf("diagnosis: %s", d)
	}
}

// simulate makes a history of clients on one log that a correct log produced: each operation
// takes effect at a random moment inside its interval (an unknown append maybe never),
// reads return up to 4 entries from the marker or later, trims stop below the last entry.
func simulate(seed int64, clients, opsPerClient int) []Record {
	rng := rand.New(rand.NewSource(seed))
	type planned struct {
		rec    Record
		at     int64 // when it takes effect
		effect bool
	}
	var plans []planned
	for c := 0; c < clients; c++ {
		t := int64(rng.Intn(10))
		for k := 0; k < opsPerClient; k++ {
			dur := int64(1 + rng.Intn(30))
			rec := Record{Client: c, Log: "s/0", Call: t, Return: ret(t + dur)}
			p := planned{at: t + rng.Int63n(dur+1), effect: true}
			switch x := rng.Intn(10); {
			case x < 5:
				rec.Op, rec.Value, rec.Count, rec.Outcome = "append", fmt.Sprintf("c%dk%d", c, k), 1, "ok"
				switch rng.Intn(8) {
				case 0:
					rec.Outcome, rec.Return = "unknown", nil
					p.at = t + rng.Int63n(200)
					p.effect = rng.Intn(2) == 0
				case 1:
					rec.Outcome, p.effect = "failed", false
				}
			case x < 8:
				rec.Op = "read"
			case x < 9:
				rec.Op = "tail"
			default:
				rec.Op, rec.Outcome = "trim", "ok"
			}
			plans = append(plans, planned{rec: rec, at: p.at, effect: p.effect})
			t += dur + int64(rng.Intn(5))
		}
	}
	sort.SliceStable(plans, func(i, j int) bool { return plans[i].at < plans[j].at })
	var log []string
	var marker int64
	var out []Record
	for _, p := range plans {
		r := p.rec
		end := int64(len(log))
		switch r.Op {
		case "append":
			if p.effect {
				r.Offset = i64(end)
				log = append(log, r.Value)
			}
		case "read":
			from := max64(0, end-int64(rng.Intn(6)))
			if rng.Intn(10) == 0 {
				from = int64(rng.Intn(int(end) + 1))
			}
			r.From, r.Marker = i64(from), i64(marker)
			for o := max64(from, marker); o < end && len(r.Entries) < 4; o++ {
				r.Entries = append(r.Entries, ReadItem{Offset: o, Count: 1, Value: log[o]})
			}
		case "tail":
			r.First, r.Next = i64(marker), i64(end)
		case "trim":
			through := int64(rng.Intn(int(end)/2 + 1))
			r.Through = i64(through)
			if end > 0 {
				marker = max64(marker, min64(through+1, end-1))
			}
			r.Marker = i64(marker)
		}
		out = append(out, r)
	}
	// The final read to the end, after everything.
	last := int64(100000)
	final := Record{Client: clients, Log: "s/0", Call: last, Return: ret(last + 1), Op: "read", From: i64(0), Marker: i64(marker), ToEnd: true}
	for o := marker; o < int64(len(log)); o++ {
		final.Entries = append(final.Entries, ReadItem{Offset: o, Count: 1, Value: log[o]})
	}
	return append(out, final)
}

func TestSimulatedHistoriesPassAndTheirMutantsFail(t *testing.T) {
	for seed := int64(1); seed <= 100; seed++ {
		records := simulate(seed, 2+int(seed%5), 60)
		started := time.Now()
		rep := check(t, records...)
		if took := time.Since(started); took > time.Second {
			t.Logf("seed %d: %v %+v", seed, took, rep.Logs[0])
		}
		if rep.Violations != 0 || rep.Undecided != 0 {
			t.Fatalf("seed %d: a correct history is rejected: %+v", seed, rep.Logs)
		}
		h := &History{Records: records}
		for _, kind := range MutationKinds {
			m, planted, err := Mutate(h, kind)
			if err != nil {
				t.Fatalf("seed %d: %s: %v", seed, kind, err)
			}
			started := time.Now()
			if rep := Check(m, testTimeout, ""); rep.Violations == 0 {
				t.Fatalf("seed %d: mutant %s not caught (%s)", seed, kind, planted)
			}
			if took := time.Since(started); took > time.Second {
				t.Logf("seed %d: mutant %s: %v", seed, kind, took)
			}
		}
	}
}

func TestMalformedRecordsAreRefusedWithTheLine(t *testing.T) {
	_, err := ReadHistory(strings.NewReader(`{"op":"append","log":"s/0","call":1,"return":2,"value":"a","outcome":"ok"}` + "\n"))
	if err == nil || !strings.Contains(err.Error(), "line 1: append record without offset") {
		t.Fatalf("%v", err)
	}
	_, err = ReadHistory(strings.NewReader("\n" + `{"op":"scan","log":"s/0"}`))
	if err == nil || !strings.Contains(err.Error(), `line 2: unknown op "scan"`) {
		t.Fatalf("%v", err)
	}
}
