package config_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spendgate/spendgate/internal/config"
)

func ExampleApply() {
	dir, _ := os.MkdirTemp("", "spendgate-config")
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "serve.conf")
	_ = os.WriteFile(file, []byte("# serve settings\ndata-dir = /var/lib/spendgate\nlisten = 0.0.0.0:4222\n"), 0o600)

	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "./spendgate-data", "")
	listen := fs.String("listen", "127.0.0.1:4222", "")
	var logging config.Logging
	logging.AddFlags(fs)
	config.AddFileFlag(fs)

	env := config.EnvFlags(fs, "data-dir", "listen") // $SPENDGATE_DATA_DIR, $SPENDGATE_LISTEN
	_ = fs.Parse([]string{"--config", file, "--listen", "127.0.0.1:5222"})
	if err := config.Apply(fs, env); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(*dataDir)      // from the file
	fmt.Println(*listen)       // the command line wins over the file
	fmt.Println(logging.Level) // the default
	// Output:
	// /var/lib/spendgate
	// 127.0.0.1:5222
	// INFO
}
