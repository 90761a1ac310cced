package main

import "fmt"

// MutationKinds are the anomalies the checker must find when they are planted in a history
// that passed.
var MutationKinds = []string{"lost", "duplicate", "reorder"}

// Mutate returns a copy of h with one anomaly planted in the final read to the end of the log
// that read the most entries, as the system would show it:
//
//   - lost: an acknowledged entry is missing, the entries after it one offset lower;
//   - duplicate: an acknowledged entry appears twice in a row, the entries after it one
//     offset higher;
//   - reorder: two adjacent acknowledged entries are swapped.
//
// It says what it changed.
func Mutate(h *History, kind string) (*History, string, error) {
	out := h.Clone()
	acked := map[string]bool{}
	for _, r := range out.Records {
		if r.Op == "append" && r.Outcome == "ok" {
			acked[r.Log+"\x00"+r.Value] = true
		}
	}
	best := -1
	for i, r := range out.Records {
		if r.Op == "read" && r.ToEnd && len(r.Entries) >= 3 && (best < 0 || len(r.Entries) > len(out.Records[best].Entries)) {
			best = i
		}
	}
	if best < 0 {
		return nil, "", fmt.Errorf("no read to the end of a log with 3 entries or more to plant an anomaly in")
	}
	rec := &out.Records[best]
	isAcked := func(i int) bool { return acked[rec.Log+"\x00"+rec.Entries[i].Value] }
	// The acknowledged entry nearest the middle that satisfies ok.
	pick := func(ok func(int) bool) int {
		mid := len(rec.Entries) / 2
		for d := 0; d < len(rec.Entries); d++ {
			for _, i := range []int{mid - d, mid + d} {
				if i >= 0 && i < len(rec.Entries) && ok(i) {
					return i
				}
			}
		}
		return -1
	}
	shift := func(from int, by int64) {
		for j := from; j < len(rec.Entries); j++ {
			rec.Entries[j].Offset += by
		}
	}
	switch kind {
	case "lost":
		i := pick(func(i int) bool { return isAcked(i) && i+1 < len(rec.Entries) })
		if i < 0 {
			return nil, "", fmt.Errorf("%s: no acknowledged entry to lose", rec.Log)
		}
		e := rec.Entries[i]
		rec.Entries = append(rec.Entries[:i], rec.Entries[i+1:]...)
		shift(i, -e.Count)
		return out, fmt.Sprintf("%s: the entry %s acknowledged at %d left out of the final read", rec.Log, e.Value, e.Offset), nil
	case "duplicate":
		i := pick(isAcked)
		if i < 0 {
			return nil, "", fmt.Errorf("%s: no acknowledged entry to duplicate", rec.Log)
		}
		e := rec.Entries[i]
		copyOf := ReadItem{Offset: e.Offset + e.Count, Count: e.Count, Value: e.Value}
		rec.Entries = append(rec.Entries[:i+1], append([]ReadItem{copyOf}, rec.Entries[i+1:]...)...)
		shift(i+2, e.Count)
		return out, fmt.Sprintf("%s: the entry %s acknowledged at %d read twice (again at %d)", rec.Log, e.Value, e.Offset, copyOf.Offset), nil
	case "reorder":
		i := pick(func(i int) bool {
			return i+1 < len(rec.Entries) && isAcked(i) && isAcked(i+1) && rec.Entries[i].Count == rec.Entries[i+1].Count
		})
		if i < 0 {
			return nil, "", fmt.Errorf("%s: no two adjacent acknowledged entries to swap", rec.Log)
		}
		a, b := rec.Entries[i], rec.Entries[i+1]
		rec.Entries[i].Value, rec.Entries[i+1].Value = b.Value, a.Value
		return out, fmt.Sprintf("%s: the entries %s (at %d) and %s (at %d) read in swapped order", rec.Log, a.Value, a.Offset, b.Value, b.Offset), nil
	}
	return nil, "", fmt.Errorf("unknown mutation %q (lost, duplicate or reorder)", kind)
}
