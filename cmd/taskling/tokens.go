package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/taskling-go/taskling/internal/principals"
)

func newTokensCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Manage the principals file of 'taskling serve': who may sign in, with which role",
		Long: `Manage a principals file (taskling serve --principals FILE): named principals, each with
a role — read (the API's reads, the dashboard, /metrics) or operate (reads and every change) —
known by the SHA-256 of their token. A running server sees an edit within a second or two; a
principal removed (or given a new token) loses its sessions. These commands need no database.`,
	}
	var file, role string
	fileFlag := func(c *cobra.Command) {
		c.Flags().StringVar(&file, "file", "", "the principals file (required)")
		c.PreRunE = func(*cobra.Command, []string) error {
			if file == "" {
				return usageErrorf("%s needs --file FILE, the principals file", c.CommandPath())
			}
			return nil
		}
	}
	add := &cobra.Command{
		Use:   "add NAME --role read|operate --file FILE",
		Short: "Make a token for a new principal: prints it once, appends its hash to FILE",
		Long: `Make a new random token (32 bytes, base64url) for the principal NAME, append NAME, its role
and the token's SHA-256 to FILE, and print the token on stdout. It is printed once and stored
nowhere: give it to its holder. A NAME the file has already is refused: remove it first to give
it a new token. FILE is created with mode 0600 if missing; otherwise its text stays as it is, and
the rewritten file keeps its owner, group and mode, less any bits for all users (a symlink is
followed: the file it names is rewritten).`,
		Args: exactArgs(1, "one argument, the principal's NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := principals.CheckName(name); err != nil {
				return usageErrorf("%v", err)
			}
			if err := principals.CheckRole(principals.Role(role)); err != nil {
				return usageErrorf("--role: %v", err)
			}
			before, _ := os.Stat(file)
			token, err := principals.Add(file, name, principals.Role(role))
			if err != nil {
				return err
			}
			noteWorldBits(e, file, before)
			if e.output == "json" {
				return printJSON(e.stdout, map[string]string{"name": name, "role": role, "token": token})
			}
			fmt.Fprintln(e.stdout, token)
			fmt.Fprintf(e.stderr, "taskling: principal %s (%s) added to %s; its token, above, is not shown again\n", name, role, file)
			return nil
		},
	}
	fileFlag(add)
	add.Flags().StringVar(&role, "role", "", "read or operate (required)")
	list := &cobra.Command{
		Use:   "list --file FILE",
		Short: "The principals of FILE: name, role, and the start of their token's hash",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ps, err := principals.Load(file)
			if errors.Is(err, os.ErrNotExist) {
				return &exitError{code: exitNotFound, err: err}
			}
			if err != nil {
				return err
			}
			if e.output == "json" {
				type row struct {
					Name        string `json:"name"`
					Role        string `json:"role"`
					TokenSHA256 string `json:"token_sha256"`
				}
				rows := make([]row, len(ps))
				for i, p := range ps {
					rows[i] = row{p.Name, string(p.Role), p.TokenSHA256}
				}
				return printJSON(e.stdout, rows)
			}
			if len(ps) == 0 {
				_, err := fmt.Fprintln(e.stdout, "No principals.")
				return err
			}
			t := newTable(e.stdout, "NAME", "ROLE", "TOKEN SHA-256")
			for _, p := range ps {
				t.row(p.Name, string(p.Role), p.TokenSHA256[:12]+"…")
			}
			return t.flush()
		},
	}
	fileFlag(list)
	remove := &cobra.Command{
		Use:   "remove NAME --file FILE",
		Short: "Remove a principal from FILE: its token stops working and its sessions end",
		Long: `Remove the principal NAME from FILE: its [[principal]] table goes, with the comment lines
directly above its header, and the rest of the text stays, rewritten as 'tokens add' does
(owner, group and mode kept, less any bits for all users). Its token stops working and its
sessions end. A NAME FILE lacks exits 3; a NAME it has but not as a [[principal]] table this
command can take out is an error that writes nothing: remove it by hand.`,
		Args: exactArgs(1, "one argument, the principal's NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			before, _ := os.Stat(file)
			err := principals.Remove(file, args[0])
			if errors.Is(err, principals.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
				return &exitError{code: exitNotFound, err: err}
			}
			if err != nil {
				return err
			}
			noteWorldBits(e, file, before)
			fmt.Fprintf(e.stderr, "taskling: principal %s removed from %s\n", args[0], file)
			return nil
		},
	}
	fileFlag(remove)
	cmd.AddCommand(add, list, remove)
	return cmd
}

// noteWorldBits says so when a rewrite took away the bits for all users that the file had: a
// server reading it as a user other than its owner must now be in its group.
func noteWorldBits(e *env, file string, before os.FileInfo) {
	if before != nil && before.Mode().Perm()&0o007 != 0 {
		fmt.Fprintf(e.stderr, "taskling: %s was open to all users (mode %04o); it is now %04o: a server reading it as another user must be in its group\n",
			file, before.Mode().Perm(), before.Mode().Perm()&^0o007)
	}
}
