"""The bash that ``DockerSandbox`` runs inside its container: the command wrapper, the killer, file I/O, the diff.

Everything that must work when the command being stopped has filled the pids table (the watchdog and the
killer) uses bash builtins only. File I/O runs as the container's user and resolves paths inside the container,
symlinks included, so the file tools reach exactly what a shell command of the same user could, inside the
repository only.
"""

from __future__ import annotations

EXEC_ENV = "CREDITGYM_EXEC"  # marks every process of one exec (a command may drop it; the tree still holds)
EXEC_NAME = "creditgym-exec-"  # + token: the wrapper's $0, so its init, itself and its watchdog can be found
INIT = "/sbin/docker-init"  # tini, mounted by `--init`; `-s` makes each exec's own copy a child subreaper

# KILL_EXEC <root> <since> <token>: SIGKILL every process of one exec, in passes until none is left. A process
# is the exec's when its parent chain reaches <root> (the exec's init: a subreaper, so orphans stay under it),
# when it hangs under PID 1 (escaped because its init died) and was born at or after <since> (clock ticks since
# boot), or when its environment carries CREDITGYM_EXEC=<token>. The caller, its shell and <root> are spared.
KILL_EXEC = r"""
_stat() {  # _stat PID: PPID and START of a process (fields 4 and 22 of /proc/PID/stat), builtins only
  local s
  read -r s < "/proc/$1/stat" 2>/dev/null || return 1
  s=${s##*) }
  set -f; set -- $s; set +f
  PPID_=$2 START_=${20}
}
killexec() {
  local root=$1 since=$2 tok=$3 pass d p q v hit
  local -A par born
  for pass in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do
    par=() born=() hit=0
    for d in /proc/[0-9]*; do
      _stat "${d#/proc/}" && par[${d#/proc/}]=$PPID_ born[${d#/proc/}]=$START_
    done
    for p in "${!par[@]}"; do
      [ "$p" = "$$" ] || [ "$p" = "$BASHPID" ] || [ "$p" = "$root" ] || [ "$p" = 1 ] && continue
      q=$p
      while [ "$q" != "$root" ] && [ "${par[$q]:-0}" != 1 ] && [ "${par[$q]:-0}" != 0 ]; do q=${par[$q]}; done
      if [ "$q" = "$root" ] || { [ "${par[$q]:-0}" = 1 ] && [ -n "$since" ] && [ "${born[$q]:-0}" -ge "$since" ]; }
      then kill -KILL "$p" 2>/dev/null; hit=1; continue; fi
      while IFS= read -r -d '' v; do
        if [ "$v" = "CREDITGYM_EXEC=$tok" ]; then kill -KILL "$p" 2>/dev/null; hit=1; break; fi
      done < "/proc/$p/environ" 2>/dev/null
    done
    [ "$hit" = 0 ] && return 0
  done
}
"""

# The killer run from outside, by a second exec, when the in-container watchdog did not stop a command (frozen):
# bash -c KILL_FROM_OUTSIDE <name> <token>. It finds the exec's init by the token in its command line.
KILL_FROM_OUTSIDE = (
    KILL_EXEC
    + r"""
tok=$1 root= since=
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = "$$" ] && continue
  while IFS= read -r -d '' v; do
    if [ "$v" = "creditgym-exec-$tok" ]; then
      _stat "$p" && { [ -z "$since" ] || [ "$START_" -lt "$since" ]; } && since=$START_
      _stat "$p" && [ "$PPID_" = 0 ] && root=$p
      break
    fi
  done < "$d/cmdline" 2>/dev/null
done
killexec "${root:-none}" "$since" "$tok"
"""
)

# INIT -s -- bash -c RUN creditgym-exec-<token> <timeout> <cmd>. The command runs as its own process group J
# (set -m). A watchdog started before it kills the whole exec at the deadline (KILL_EXEC), with builtins only, so
# it needs no new process (a fork bomb that fills the pids table cannot stop it); once it has started killing it
# ignores TERM, so the wrapper, woken by J's death, lets it finish. Its sleep runs in the background under
# `wait`, which a TERM interrupts at once: a TERM that reached a foreground sleep between fork and exec was lost,
# and the wrapper then waited out the whole timeout (a fast command returning a minute late, rarely). When the
# command returns first, what is left
# of J (background jobs) is killed and the watchdog is stopped; only processes started in a new session (setsid)
# outlive the command. The wrapper's own stdout/stderr go to /dev/null (job notices) and it drops its copies of
# the stream, so the stream ends with the command's last writer.
RUN = (
    KILL_EXEC
    + r"""
_stat $$; since=$START_
exec 3>&1 4>&2 >/dev/null 2>&1
set -m
bash -lc "$2" >&3 2>&4 3>&- 4>&- &
job=$!
{ trap 'exit 0' TERM; CREDITGYM_EXEC= sleep "$1" & wait $!; trap '' TERM; kill -KILL -- -"$job"
  killexec "$PPID" "$since" "$CREDITGYM_EXEC"; } 3>&- 4>&- &
dog=$!
exec 3>&- 4>&-
wait "$job"
rc=$?
kill -KILL -- -"$job"
kill -TERM -- -"$dog"
kill -CONT -- -"$dog"
wait "$dog"
exit $rc
"""
)

# bash -c PROBE <name> <kill> <root>...: "<bytes> <entries>": the bytes of deleted files some process still holds
# open (the writable layer's size does not count them), and the files and folders under the roots (the folders
# the user can write, found once at start: new inodes cost the host though they hold no byte). With <kill> = 1,
# every process holding a deleted file is killed first, which frees those bytes. find, sort and wc only.
PROBE = r"""
kill=$1; shift
held() { find -L /proc/[0-9]*/fd -maxdepth 1 -type f -links 0 -printf "$1" 2>/dev/null; }
if [ "$kill" = 1 ]; then
  held '%h\n' | while IFS=/ read -r _ _ pid _; do
    [ "$pid" != 1 ] && [ "$pid" != $$ ] && kill -KILL "$pid" 2>/dev/null
  done
fi
bytes=0
while read -r _ size; do bytes=$((bytes + size)); done < <(held '%D:%i %s\n' | sort -u)
printf '%s %s\n' "$bytes" "$(find "$@" -xdev 2>/dev/null | wc -l)"
"""

# bash -c ROOTS <name>: the top folders of the container's root filesystem that the user can write (4 deep).
ROOTS = "find / -xdev -maxdepth 4 -type d -writable -prune -print 2>/dev/null"

# Exit codes of READ and WRITE, and what each one means for the caller.
NO_FILE, OUTSIDE, IS_DIR, NOT_REGULAR, TOO_LARGE, DENIED = 2, 3, 4, 5, 6, 13

_INSIDE = r"""
inside() { case $1 in "$w"|"$w"/*) return 0;; *) printf '%s' "$1" >&2; return 1;; esac; }
opened() { readlink "/proc/$$/fd/3"; }
"""

# bash -c READ <name> <workdir> <path> <limit>: the file's bytes on stdout, or an exit code above. The path is
# resolved in the container, opened, and what was opened is checked again (a link swapped meanwhile is caught).
READ = (
    _INSIDE
    + r"""
w=$1 p=$2 limit=$3
[ -e "$p" ] || exit 2
real=$(realpath -e -- "$p" 2>/dev/null) || exit 2
inside "$real" || exit 3
[ -d "$real" ] && exit 4
[ -f "$real" ] || exit 5
{ exec 3<"$real"; } 2>/dev/null || exit 13
inside "$(opened)" || exit 3
[ -f "/proc/$$/fd/3" ] || exit 5
size=$(stat -L -c %s "/proc/$$/fd/3")
[ "$size" -gt "$limit" ] && { printf '%s' "$size" >&2; exit 6; }
exec head -c "$limit" <&3
"""
)

# bash -c WRITE <name> <workdir> <path> < data: write stdin to the file (parents created, mode kept or 0644).
# stdin is drained on every exit, so the sender never blocks.
WRITE = (
    _INSIDE
    + r"""
trap 'cat >/dev/null' EXIT
w=$1 p=$2
real=$(realpath -m -- "$p" 2>/dev/null) || exit 2
inside "$real" || exit 3
[ "$real" = "$w" ] || [ -d "$real" ] && exit 4
mkdir -p -- "${real%/*}" 2>/dev/null || exit 13
{ exec 3<>"$real"; } 2>/dev/null || { [ -d "$real" ] && exit 4; exit 13; }
inside "$(opened)" || exit 3
[ -f "/proc/$$/fd/3" ] || exit 5
: > "/proc/$$/fd/3" || exit 13
cat >&3
"""
)

# Defines `git` for every git command creditgym runs in a sandbox: hooks and fsmonitor off, whatever the
# repository's config says (both name commands git would run, as the sandbox's user, inside our commands).
SAFE_GIT = (
    "git() { command git -c core.hooksPath=/dev/null -c core.fsmonitor= -c safe.directory='*' \"$@\"; }\n"
)

# A fingerprint of .git/ but its index and objects (what git itself rewrites): path, type, size, mode, change
# time and link target of every file. Plain find: no git command, so nothing of the repository's config runs.
GIT_STATE = (
    r"find .git \( -path .git/objects -o -path .git/index \) -prune -o ! -type d "
    r"-printf '%P %y %s %m %C@ %l\n' 2>&1 | LC_ALL=C sort | sha256sum"
)

# The repository's changes as a patch, taken with a throw-away git directory that shares the repository's objects
# (alternates), its index (a copy) and its excludes, and no config at all, the repository's, the user's or the
# system's (filters, fsmonitor, textconv, external diffs, hooks): nothing the agent configured runs while the diff
# is taken, so nothing can write into it.
DIFF = (
    SAFE_GIT
    + r"""
set -e
common=$(cd "$(git rev-parse --git-common-dir)" && pwd)
index=$(git rev-parse --git-path index)
base=$(git rev-parse -q --verify HEAD^{tree} || git hash-object -t tree /dev/null)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/objects/info" "$tmp/refs" "$tmp/info"
printf '%s\n' "$common/objects" > "$tmp/objects/info/alternates"
printf 'ref: refs/heads/creditgym\n' > "$tmp/HEAD"
cp "$common/info/exclude" "$tmp/info/exclude" 2>/dev/null || true
cp "$index" "$tmp/index" 2>/dev/null || true
export GIT_DIR="$tmp" GIT_WORK_TREE="$PWD" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null HOME="$tmp" \
  XDG_CONFIG_HOME="$tmp"
git add -A 2>/dev/null || { rm -f "$tmp/index"; git add -A; }
git diff --cached --binary --no-color --no-ext-diff --no-textconv --no-renames "$base"
"""
)
