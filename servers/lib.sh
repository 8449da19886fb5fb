# servers/lib.sh — shared bash for the reference servers' `run` scripts.
# Sourced, never executed. Every run script does:
#   source "$(dirname "$0")/../lib.sh"; srv_init <name> "$@"
# and then builds/installs what it needs and ends with `srv_exec <command...>`.
#
# Contract (see servers/README.md):
#   run --port PORT [--cpus LIST] [--backlog N] [--workers N] [--no-keepalive]
# Unknown `--flag[=value]` / `--flag value` arguments are kept in SRV_EXTRA for
# scripts that accept more (faulty, busy-thread); the others reject them.

SRV_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Default listen backlog: the same as nginx's default on Linux, used by every
# server so that comparisons are fair (the kernel caps it at net.core.somaxconn).
SRV_DEFAULT_BACKLOG=511

srv_die() {
	echo "${SRV_NAME:-servers}: $*" >&2
	exit 2
}

srv_usage() {
	cat >&2 <<USAGE
usage: servers/${SRV_NAME}/run --port PORT [--cpus LIST] [--backlog N] [--workers N] [--no-keepalive]${SRV_USAGE_EXTRA:+ $SRV_USAGE_EXTRA}
  --port PORT      listen on 127.0.0.1:PORT (required)
  --cpus LIST      pin the server with taskset -c LIST (e.g. 1 or 1-3)
  --backlog N      listen(2) backlog (default $SRV_DEFAULT_BACKLOG; capped by net.core.somaxconn)
  --workers N      worker processes / threads / schedulers (meaning per server, see README)
  --no-keepalive   close the connection after every response
USAGE
}

srv_is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }

# srv_init NAME ARGS... — parse the common command line into
# SRV_PORT SRV_CPUS SRV_BACKLOG SRV_WORKERS SRV_KEEPALIVE(1/0) and SRV_EXTRA[].
srv_init() {
	SRV_NAME="$1"
	shift
	SRV_DIR="$SRV_ROOT/$SRV_NAME"
	SRV_PORT=""
	SRV_CPUS=""
	SRV_BACKLOG="$SRV_DEFAULT_BACKLOG"
	SRV_WORKERS=""
	SRV_KEEPALIVE=1
	SRV_EXTRA=()
	local arg val
	while (($#)); do
		arg="$1"
		shift
		val=""
		case "$arg" in
		--*=*)
			val="${arg#*=}"
			arg="${arg%%=*}"
			set -- "$val" "$@"
			;;
		esac
		case "$arg" in
		-h | --help)
			srv_usage
			exit 0
			;;
		--port | --cpus | --backlog | --workers)
			(($#)) || srv_die "$arg needs a value"
			val="$1"
			shift
			case "$arg" in
			--port) SRV_PORT="$val" ;;
			--cpus) SRV_CPUS="$val" ;;
			--backlog) SRV_BACKLOG="$val" ;;
			--workers) SRV_WORKERS="$val" ;;
			esac
			;;
		--no-keepalive) SRV_KEEPALIVE=0 ;;
		--*)
			# Server-specific flag: keep it (and its value, if the next word is not a flag).
			SRV_EXTRA+=("$arg")
			if (($#)) && [[ "$1" != --* ]]; then
				SRV_EXTRA+=("$1")
				shift
			fi
			;;
		*) srv_die "unexpected argument '$arg' (try --help)" ;;
		esac
	done
	[[ -n "$SRV_PORT" ]] || {
		srv_usage
		srv_die "--port is required"
	}
	srv_is_uint "$SRV_PORT" && ((SRV_PORT >= 1 && SRV_PORT <= 65535)) || srv_die "bad --port '$SRV_PORT'"
	srv_is_uint "$SRV_BACKLOG" && ((SRV_BACKLOG >= 1)) || srv_die "bad --backlog '$SRV_BACKLOG'"
	if [[ -n "$SRV_WORKERS" ]]; then
		srv_is_uint "$SRV_WORKERS" && ((SRV_WORKERS >= 1)) || srv_die "bad --workers '$SRV_WORKERS'"
	fi
	if [[ -n "$SRV_CPUS" ]]; then
		[[ "$SRV_CPUS" =~ ^[0-9,-]+$ ]] || srv_die "bad --cpus '$SRV_CPUS' (taskset -c list, e.g. 1 or 0,2-3)"
	fi
}

# Reject server-specific flags for servers that have none.
# srv_nginx_options — takes the nginx servers' own options out of SRV_EXTRA:
#   --worker-connections N  (default 16384: room for a 10,000-connection client)
#   --keepalive-timeout S   (default 65, nginx's own; --no-keepalive makes it 0)
#   --reuseport             (listen ... reuseport: the kernel spreads connections over the workers)
# nginx closes idle keep-alive connections whenever fewer than 1/16 of worker_connections are
# free, so a client holding more than 15/16 of them sees its connections closed under it.
srv_nginx_options() {
	SRV_NGINX_WORKER_CONNECTIONS=16384
	SRV_NGINX_KEEPALIVE_TIMEOUT=65
	SRV_NGINX_REUSEPORT=""
	local rest=() i=0
	while ((i < ${#SRV_EXTRA[@]})); do
		case "${SRV_EXTRA[i]}" in
		--reuseport)
			SRV_NGINX_REUSEPORT=" reuseport"
			i=$((i + 1))
			;;
		--worker-connections)
			SRV_NGINX_WORKER_CONNECTIONS="${SRV_EXTRA[i + 1]:-}"
			i=$((i + 2))
			;;
		--keepalive-timeout)
			SRV_NGINX_KEEPALIVE_TIMEOUT="${SRV_EXTRA[i + 1]:-}"
			i=$((i + 2))
			;;
		*)
			rest+=("${SRV_EXTRA[i]}")
			i=$((i + 1))
			;;
		esac
	done
	[[ "$SRV_NGINX_WORKER_CONNECTIONS" =~ ^[0-9]+$ ]] || srv_die "--worker-connections needs a number"
	[[ "$SRV_NGINX_KEEPALIVE_TIMEOUT" =~ ^[0-9]+$ ]] || srv_die "--keepalive-timeout needs a number of seconds"
	SRV_EXTRA=("${rest[@]}")
}

srv_no_extra() {
	((${#SRV_EXTRA[@]} == 0)) || srv_die "unknown option(s): ${SRV_EXTRA[*]} (try --help)"
}

# srv_state_dir — per-instance runtime dir (config, pid, logs); printed path.
srv_state_dir() {
	SRV_STATE="${XDG_RUNTIME_DIR:-/tmp}/srvprof-servers/${SRV_NAME}-${SRV_PORT}"
	mkdir -p "$SRV_STATE"
}

# srv_quiet LOG CMD... — run CMD with all output into LOG; on failure show LOG
# on stderr and exit. Keeps stdout clean.
srv_quiet() {
	local log="$1"
	shift
	if ! "$@" >"$log" 2>&1; then
		echo "${SRV_NAME}: command failed: $*" >&2
		tail -n 60 "$log" >&2
		exit 1
	fi
}

# srv_lock FILE — serialise builds/installs between concurrent `run`s.
# The lock fd (9) is closed by srv_exec so the server does not inherit it.
srv_lock() {
	mkdir -p "$(dirname "$1")"
	exec 9>"$1"
	flock 9
}
srv_unlock() { exec 9>&- || true; }

srv_pkg_installed() {
	[[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]
}

# srv_apt_install PKG... — install missing Debian packages, quietly. Runs
# `apt-get update` only when the first install attempt fails. Services that a
# package would start (nginx on :80) are blocked with a temporary policy-rc.d.
srv_apt_install() {
	local missing=() p
	for p in "$@"; do
		srv_pkg_installed "$p" || missing+=("$p")
	done
	((${#missing[@]})) || return 0
	local sudo=()
	if ((EUID != 0)); then
		command -v sudo >/dev/null || srv_die "need root (or sudo) to apt-get install ${missing[*]}"
		sudo=(sudo -n)
	fi
	srv_lock "${XDG_RUNTIME_DIR:-/tmp}/srvprof-servers/.apt.lock"
	local policy=/usr/sbin/policy-rc.d made_policy=0
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null && "${sudo[@]}" chmod 755 "$policy" && made_policy=1
	fi
	local log rc=0
	log="$(mktemp)"
	local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=120 install --no-install-recommends)
	if ! "${apt[@]}" "${missing[@]}" >"$log" 2>&1; then
		{ "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=120 update &&
			"${apt[@]}" "${missing[@]}"; } >>"$log" 2>&1 || rc=$?
	fi
	((made_policy)) && "${sudo[@]}" rm -f "$policy"
	srv_unlock
	if ((rc != 0)); then
		echo "${SRV_NAME}: apt-get install ${missing[*]} failed:" >&2
		tail -n 40 "$log" >&2
		rm -f "$log"
		exit 1
	fi
	rm -f "$log"
}

# srv_need_tool NAME [DIR...] — print the path of a tool, looking in PATH and
# then in the given fallback dirs (e.g. /usr/local/go/bin, ~/.cargo/bin).
srv_need_tool() {
	local name="$1" d
	shift
	if command -v "$name" 2>/dev/null; then return 0; fi
	for d in "$@"; do
		if [[ -x "$d/$name" ]]; then
			echo "$d/$name"
			return 0
		fi
	done
	srv_die "'$name' not found (looked in PATH and $*)"
}

# srv_stale OUT SRC... — true when OUT is missing or older than any SRC.
srv_stale() {
	local out="$1" s
	shift
	[[ -e "$out" ]] || return 0
	for s in "$@"; do
		[[ "$s" -nt "$out" ]] && return 0
	done
	return 1
}

# srv_exec CMD... — exec CMD in the foreground (same PID as the run script),
# pinned with taskset when --cpus was given.
srv_exec() {
	srv_unlock
	if [[ -n "$SRV_CPUS" ]]; then
		exec taskset -c "$SRV_CPUS" "$@"
	fi
	exec "$@"
}

# ---------------------------------------------------------------- nginx ----
# srv_nginx_exec MAIN_EXTRA SERVER_BODY — write nginx.conf into the state dir
# and exec nginx in the foreground (daemon off, master + workers).
# MAIN_EXTRA goes into the main context (load_module ...), SERVER_BODY into
# the server block (locations).
srv_nginx_exec() {
	local main_extra="$1" server_body="$2"
	srv_apt_install nginx-light
	local nginx=/usr/sbin/nginx
	[[ -x $nginx ]] || srv_die "$nginx missing after installing nginx-light"
	srv_state_dir
	local s="$SRV_STATE"
	mkdir -p "$s/temp"
	local user_line=""
	# As root, run workers as www-data like Debian's production config —
	# unless www-data cannot read the state dir (e.g. XDG_RUNTIME_DIR 0700).
	if ((EUID == 0)); then
		if id www-data >/dev/null 2>&1 &&
			setpriv --reuid=www-data --regid=www-data --clear-groups test -r "$s" -a -x "$s" 2>/dev/null; then
			user_line="user www-data www-data;"
		else
			user_line="user root root;"
		fi
	fi
	local ka="keepalive_timeout ${SRV_NGINX_KEEPALIVE_TIMEOUT:-65};"
	((SRV_KEEPALIVE)) || ka="keepalive_timeout 0;"
	cat >"$s/nginx.conf" <<CONF
# generated by servers/${SRV_NAME}/run — do not edit
$main_extra
$user_line
daemon off;
master_process on;
worker_processes ${SRV_WORKERS:-1};
worker_rlimit_nofile 20000;
pid $s/nginx.pid;
error_log $s/error.log notice;

events {
    # Default: room for a 10,000-connection client plus listeners, within the 20,000 open-file
    # limit (--worker-connections N).
    worker_connections ${SRV_NGINX_WORKER_CONNECTIONS:-16384};
}

http {
    access_log off;
    $ka
    keepalive_requests 1000000;
    server_tokens off;
    types { text/html html; }
    default_type text/plain;
    client_body_temp_path $s/temp/body;
    proxy_temp_path $s/temp/proxy;
    fastcgi_temp_path $s/temp/fastcgi;
    uwsgi_temp_path $s/temp/uwsgi;
    scgi_temp_path $s/temp/scgi;

    server {
        listen 127.0.0.1:${SRV_PORT} backlog=${SRV_BACKLOG}${SRV_NGINX_REUSEPORT:-};
$server_body
    }
}
CONF
	srv_exec "$nginx" -p "$s/" -e "$s/error.log" -c "$s/nginx.conf"
}

# The 512-byte body every server returns for GET /512b: 511 x 'a' then '\n'.
srv_body512() {
	local a
	printf -v a '%511s' ''
	printf '%s\n' "${a// /a}"
}
