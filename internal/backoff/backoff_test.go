package backoff

import (
	"context"
	"testing"
	"time"
)

func TestDelayGrowsAndStaysWithinJitterBounds(t *testing.T) {
	for n := 0; n < 40; n++ {
		want := min(time.Millisecond<<min(n, 30), 50*time.Millisecond)
		for range 50 {
			d := Delay(n, time.Millisecond, 50*time.Millisecond)
			if d < want/2 || d > want {
				t.Fatalf("Delay(%d) = %s; want within [%s, %s]", n, d, want/2, want)
			}
		}
	}
	if d := Delay(3, 0, 0); d != 0 {
		t.Fatalf("Delay with no limit = %s; want 0", d)
	}
}

func TestSleepReturnsContextErrorWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, 10, time.Hour, time.Hour); err != context.Canceled {
		t.Fatalf("Sleep = %v; want context.Canceled", err)
	}
	if err := Sleep(context.Background(), 0, time.Microsecond, time.Microsecond); err != nil {
		t.Fatalf("Sleep = %v; want nil", err)
	}
}
