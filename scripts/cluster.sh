# A throwaway PostgreSQL cluster for the tests (sourced by scripts/test.sh):
# initdb into a temporary directory, a Unix socket there and a port of its
# own, so several can run side by side on one machine.  The server runs as
# the OS user postgres when started by root (initdb refuses root).
#
#   ctxwin_cluster_start [SETTING ...]
#                          initdb (UTF8, locale C.UTF-8, whatever the
#                          caller's LANG) and start, with the settings given
#                          ("name = value" lines for postgresql.conf);
#                          exports PGHOST, PGPORT, PGUSER, PGDATABASE for the
#                          commands that follow
#   ctxwin_cluster_stop    stop it and remove its directory (kept, to read its
#                          log, with CTXWIN_KEEP_CLUSTER=1)
# Uses initdb and pg_ctl from PATH (scripts/pg.sh's ctxwin_pg_use).

# Run a command as the server's OS user.
ctxwin_as_pg() {
	if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# A TCP port nothing listens on (the socket file's name carries it).
_ctxwin_free_port() {
	local p
	for p in $(shuf -i 20000-60000 -n 50); do
		if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && [ ! -e "/tmp/.s.PGSQL.$p" ]; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

ctxwin_cluster_start() {
	CTXWIN_CLUSTER_DIR=$(mktemp -d /tmp/ctxwin-cluster.XXXXXX)
	chmod 755 "$CTXWIN_CLUSTER_DIR"
	[ "$(id -u)" -eq 0 ] && chown postgres: "$CTXWIN_CLUSTER_DIR"
	local d=$CTXWIN_CLUSTER_DIR port
	port=$(_ctxwin_free_port)
	ctxwin_as_pg initdb -D "$d/data" -A trust -U postgres -E UTF8 --locale=C.UTF-8 --no-sync \
		>"$d/initdb.log" 2>&1 || { cat "$d/initdb.log"; return 1; }
	cat >>"$d/data/postgresql.conf" <<CONF
port = $port
listen_addresses = ''
unix_socket_directories = '$d'
fsync = off
max_connections = 100
logging_collector = on
log_directory = 'log'
CONF
	local setting
	for setting in "$@"; do echo "$setting" >>"$d/data/postgresql.conf"; done
	ctxwin_as_pg pg_ctl -D "$d/data" -l "$d/server.log" -w -t 60 start >/dev/null ||
		{ cat "$d/server.log"; return 1; }
	export PGHOST=$d PGPORT=$port PGUSER=postgres PGDATABASE=postgres
	unset PGPASSWORD PGSERVICE PGSERVICEFILE PGOPTIONS
}

ctxwin_cluster_stop() {
	local d=${CTXWIN_CLUSTER_DIR:-}
	[ -n "$d" ] || return 0
	[ -f "$d/data/postmaster.pid" ] && ctxwin_as_pg pg_ctl -D "$d/data" -m fast -w stop >/dev/null 2>&1
	if [ -n "${CTXWIN_KEEP_CLUSTER:-}" ]; then
		echo "the cluster's directory is kept: $d (server log in $d/data/log)"
	else
		rm -rf "$d"
	fi
	CTXWIN_CLUSTER_DIR=
}
