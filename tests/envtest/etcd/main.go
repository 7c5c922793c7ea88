// Command etcd is an etcd server for the tests' control plane: etcd's own entry point behind
// the few lines a main package needs, so it builds from the Go module proxy like kube-apiserver.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
