module github.com/gosleuth/gosleuth/bench/load-vs-peers

go 1.26.0
