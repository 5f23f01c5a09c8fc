# Sourced by the e2e scripts.
# proc_stat PID N: field N of /proc/PID/stat, numbered as proc(5) numbers them (the
# command name, field 2, may hold spaces: the fields are counted after it); empty when
# there is no such process
proc_stat() { sed -n 's/^.*) //p' "/proc/$1/stat" 2>/dev/null | awk -v n="$2" '{print $(n - 2)}'; }
# starttime PID: when the process started, in clock ticks after boot (field 22)
starttime() { proc_stat "$1" 22; }
