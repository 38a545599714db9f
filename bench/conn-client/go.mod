module fulcrum/bench/conn-client

go 1.21
