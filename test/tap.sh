# Minimal TAP for the shell tests in test/*.t (sourced).
_tap_n=0
_tap_failed=0
plan() { echo "1..$1"; }
ok() {
	# ok CONDITION-EXIT-CODE DESCRIPTION
	_tap_n=$((_tap_n + 1))
	if [ "$1" -eq 0 ]; then echo "ok $_tap_n - $2"; else echo "not ok $_tap_n - $2"; _tap_failed=$((_tap_failed + 1)); fi
}
is() {
	# is GOT WANT DESCRIPTION
	if [ "$1" = "$2" ]; then ok 0 "$3"; else ok 1 "$3"; echo "#   got:      '$1'"; echo "#   expected: '$2'"; fi
}
like() {
	# like GOT SUBSTRING DESCRIPTION
	case "$1" in *"$2"*) ok 0 "$3" ;; *) ok 1 "$3"; echo "#   got: '$1'"; echo "#   expected to contain: '$2'" ;; esac
}
diag() { echo "# $*"; }
done_testing() { [ "$_tap_failed" -eq 0 ]; }
