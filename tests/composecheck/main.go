// Command composecheck loads a Compose file the way `docker compose config` does (it is the
// same loader, github.com/compose-spec/compose-go): schema validation, variable
// interpolation, normalization and the consistency checks (every network, volume, secret and
// depends_on named exists). scripts/check-deploy runs it where no Docker CLI is installed.
//
//	composecheck [-profile NAME]... [-env KEY=VALUE]... docker-compose.yml
//
// It prints the services it loaded and exits 1 naming what is wrong.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var profiles, env list
	flag.Var(&profiles, "profile", "enable a profile (repeatable)")
	flag.Var(&env, "env", "set a variable KEY=VALUE for interpolation (repeatable)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: composecheck [-profile NAME]... [-env KEY=VALUE]... docker-compose.yml")
		os.Exit(2)
	}
	file, err := filepath.Abs(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	opts, err := cli.NewProjectOptions([]string{file},
		cli.WithWorkingDirectory(filepath.Dir(file)),
		cli.WithOsEnv,
		cli.WithEnv(env),
		cli.WithProfiles(profiles),
		cli.WithConsistency(true),
		cli.WithInterpolation(true),
		cli.WithNormalization(true),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", flag.Arg(0), err)
		os.Exit(1)
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", flag.Arg(0), err)
		os.Exit(1)
	}
	names := project.ServiceNames()
	sort.Strings(names)
	fmt.Printf("%s (profiles %v): %d services: %s\n", flag.Arg(0), []string(profiles), len(names), strings.Join(names, ", "))
}
