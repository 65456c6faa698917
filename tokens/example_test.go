package tokens_test

import (
	"fmt"

	"github.com/google/uuid"

	"github.com/taskling-go/taskling/tokens"
)

// Lowering a limit below the running executions retires the surplus instead of evicting it;
// the slot disappears when its holder returns it.
func Example() {
	n := 0
	newID := func() uuid.UUID { n++; return uuid.UUID{15: byte(n)} }
	alive := func(id int64) bool { return id == 7 || id == 8 }

	list, _ := tokens.Parse("")
	list, _, _ = list.Adjust(2, alive, nil, newID)
	list, first := list.Grant(7, alive)
	list, second := list.Grant(8, alive)
	list, _, _ = list.Adjust(1, alive, nil, newID)
	fmt.Println(list)

	list, ok := list.Return(second.TokenID, 8)
	fmt.Println(ok, list)
	_, ok = list.Return(first.TokenID, 7)
	fmt.Println(ok)
	// Output:
	// I:00000000-0000-0000-0000-000000000001,S:0,G:7|I:00000000-0000-0000-0000-000000000002,S:2,G:8
	// true I:00000000-0000-0000-0000-000000000001,S:0,G:7
	// true
}
