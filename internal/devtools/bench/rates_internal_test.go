package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// TestWindowsOverFindsGrantsOverTheRate: the rate check counts a window's units by cost, from
// each grant back to Per before it (half-open), and flags each grant that takes it past Count +
// Burst − 1, whatever order the grants come in.
func TestWindowsOverFindsGrantsOverTheRate(t *testing.T) {
	rate := taskling.Rate{Count: 10, Per: 100 * time.Millisecond}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var even []grant // 10 a window exactly: one every 10 ms
	for i := range 40 {
		even = append(even, grant{t0.Add(time.Duration(i) * 10 * time.Millisecond), 1})
	}
	most, over := windowsOver(even, rate)
	require.Equal(t, int64(10), most)
	require.Zero(t, over, "a grant exactly Per after another is in the next window")

	burst := append([]grant{}, even...) // two more, of cost 2 and 1, inside one window: 13 units
	burst = append(burst, grant{t0.Add(205 * time.Millisecond), 2}, grant{t0.Add(206 * time.Millisecond), 1})
	for i, j := 0, len(burst)-1; i < j; i, j = i+1, j-1 { // any order
		burst[i], burst[j] = burst[j], burst[i]
	}
	most, over = windowsOver(burst, rate)
	require.Equal(t, int64(13), most)
	require.Positive(t, over)

	most, over = windowsOver(burst, taskling.Rate{Count: 10, Per: 100 * time.Millisecond, Burst: 4})
	require.Equal(t, int64(13), most)
	require.Zero(t, over, "Count + Burst − 1 = 13 units are allowed")
}
