package events_test

import (
	"fmt"

	"github.com/spendgate/spendgate/events"
)

// Twenty reservations of 0.05 fit a ceiling of 1.00 exactly: money is an
// exact decimal, never a float.
func ExampleParseMoney() {
	price, err := events.ParseMoney("0.05")
	if err != nil {
		panic(err)
	}
	limit := events.MustMoney("1.00")

	total := events.Zero
	for range 20 {
		total = total.Add(price)
	}
	fmt.Println(total, total.Cmp(limit) == 0)

	_, err = events.ParseMoney("1e3")
	fmt.Println(events.CodeOf(err))
	// Output:
	// 1 true
	// invalid_amount
}
