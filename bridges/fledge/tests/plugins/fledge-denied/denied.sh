#!/usr/bin/env bash
read -r init
echo '{"type":"exec","id":"e","command":"echo should-not-run"}'
read -r r1
echo '{"type":"store","key":"k","value":"v"}'
echo '{"type":"load","id":"l","key":"k"}'
read -r r2
echo '{"type":"metadata","id":"m","keys":["env","git_log"]}'
read -r r3
printf '{"type":"output","text":"%s|%s|%s\\n"}\n' "${r1//\"/\'}" "${r2//\"/\'}" "${r3//\"/\'}"
