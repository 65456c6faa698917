// Package tokens holds the concurrency slots of one task as a list of tokens, and the pure
// operations on it: Adjust to a limit, Grant a slot, Return a slot.
//
// The package does no I/O and reads no clock. The caller (package execution) loads the list,
// judges which executions are still alive, calls these functions inside its row-locked
// transaction and stores the result. Every operation returns a new List and leaves its
// receiver unchanged.
//
// # Format
//
// A list is stored as one string, a token per '|'-separated entry:
//
//	I:<uuid>,S:<status>,G:<execution id>|I:<uuid>,S:<status>,G:<execution id>|…
//
// Status is 0 held, 1 available, 2 retiring, 3 unlimited; G is the last grantee (0 = none).
// The empty string is the initial, empty list. [Parse] is strict: any malformed input is a
// [*FormatError] naming the token and the field, never a panic and never a silent reset, because
// a corrupted list that parsed as "no holders" would let a task exceed its limit.
// [List.String] writes the canonical form, and Parse(l.String()) equals l for every list that
// Parse or the operations can produce.
//
// # Guarantees
//
//   - A live holder is never evicted. Lowering the limit below the number of live holders marks
//     the surplus tokens [Retiring]: they are removed when returned or once their holder is dead,
//     and are re-admitted as [Held] if the limit is raised again.
//   - A limited list never grants beyond its limit: Grant succeeds only if afterwards the
//     held and retiring tokens, dead holders included, number at most [List.Limit].
//   - Retiring tokens are never granted. Grant takes a held token only from a dead holder (a
//     missing or completed execution counts as dead) and reports that holder, so the caller can
//     fence it off.
//   - Return is identity-checked: only the execution that still holds a slot can give it back.
//   - An unlimited task has one shared [Unlimited] token. Switching to a limit adopts the
//     executions still running under it, so they count against the new limit.
//
// # Example
//
//	list, _ := tokens.Parse(stored)
//	list, reclaimed, err := list.Adjust(limit, alive, runningUnderUnlimited, uuid.New)
//	if err != nil {
//		return err
//	}
//	list, grant := list.Grant(execID, alive)
//	// store list.String(); mark reclaimed and grant.Reclaimed as reclaimed;
//	// on completion: list, stillHeld := list.Return(grant.TokenID, execID)
package tokens
