module srvprof/servers/go

go 1.22
