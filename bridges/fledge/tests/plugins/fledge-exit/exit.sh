#!/usr/bin/env bash
read -r init
code=$(printf '%s' "$init" | python3 -c 'import sys,json; print(json.load(sys.stdin)["args"][0])')
echo '{"type":"output","text":"about to exit\n"}'
echo "plain stderr from the plugin" >&2
echo '{"type":"log","level":"error","message":"failing on purpose"}'
exit "$code"
