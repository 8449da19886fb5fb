#!/usr/bin/env bash
# servers/smoke.sh — start each reference server, check / and /512b, run a short
# bounded wrk (and ab for nginx-*), stop it with SIGTERM and check nothing is left.
# usage: servers/smoke.sh [SERVER...]   (default: all reference servers)
# env: PORT (default 18400), SERVER_CPUS (1), CLIENT_CPUS (0), DURATION (3s), CONNS (50)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
port="${PORT:-18400}"
scpus="${SERVER_CPUS:-1}"
ccpus="${CLIENT_CPUS:-0}"
dur="${DURATION:-3s}"
conns="${CONNS:-50}"
servers=("$@")
((${#servers[@]})) || servers=(nginx-html nginx-hello nginx-lua go erlang java-netty rust-hyper)
fail=0

waitport() {
	local i
	for i in $(seq 1200); do # up to 120 s (first builds)
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# start NAME ARGS... -> sets pid; the server runs in its own process group.
start() {
	local name="$1"
	shift
	setsid "$here/$name/run" --port "$port" --cpus "$scpus" "$@" >"/tmp/smoke-$name.out" 2>"/tmp/smoke-$name.err" &
	pid=$!
	waitport "$port" "$pid" || {
		echo "$name: not ready"
		cat "/tmp/smoke-$name.err"
		return 1
	}
}

stop() {
	kill -TERM "$pid" 2>/dev/null
	for _ in $(seq 50); do
		kill -0 -- "-$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 -- "-$pid" 2>/dev/null; then
		echo "  LEFTOVER processes after SIGTERM:"
		pgrep -a -g "$pid"
		kill -KILL -- "-$pid"
		fail=1
	fi
	wait "$pid" 2>/dev/null
}

wrk_rps() { taskset -c "$ccpus" wrk -t1 -c"$conns" -d"$dur" "$1" | awk '/Requests\/sec/ {print $2} /Non-2xx|Socket errors/ {print "  wrk: " $0 > "/dev/stderr"}'; }
ab_rps() { taskset -c "$ccpus" ab -q -c "$conns" -n 5000 "$1" 2>&1 | awk '/Requests per second/ {print $4} /Failed requests: +[1-9]/ {print "  ab: " $0 > "/dev/stderr"}'; }

for s in "${servers[@]}"; do
	t0=$(date +%s.%N)
	start "$s" || {
		fail=1
		continue
	}
	t1=$(date +%s.%N)
	url="http://127.0.0.1:$port"
	hello="$(curl -s -m 5 "$url/")"
	n512="$(curl -s -m 5 "$url/512b" | wc -c)"
	cl="$(curl -s -m 5 -D - -o /dev/null "$url/512b" | tr -d '\r' | awk -F': ' 'tolower($1)=="content-length" {print $2}')"
	ok=ok
	[[ "$hello" == "hello world" && "$n512" == 512 && "$cl" == 512 ]] || {
		ok="BAD (/='$hello' /512b=$n512 bytes, Content-Length=$cl)"
		fail=1
	}
	rps="$(wrk_rps "$url/")"
	line="$s: start $(printf '%.2f' "$(echo "$t1 - $t0" | bc)")s, check $ok, wrk -c$conns keep-alive $rps req/s"
	if [[ $s == nginx-* ]]; then line+=", ab -c$conns (keep-alive server) $(ab_rps "$url/") req/s"; fi
	stop
	if [[ $s == nginx-* ]]; then
		start "$s" --no-keepalive || {
			fail=1
			continue
		}
		conn_hdr="$(curl -s -D - -o /dev/null "$url/" | tr -d '\r' | awk -F': ' 'tolower($1)=="connection" {print $2}')"
		line+=", --no-keepalive: Connection=$conn_hdr, ab $(ab_rps "$url/") req/s"
		stop
	fi
	echo "$line"
done
exit $fail
