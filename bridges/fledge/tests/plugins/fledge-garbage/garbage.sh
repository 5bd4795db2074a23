#!/usr/bin/env bash
read -r init
echo 'this is not json'
echo '{"type":"prompt","message":"no id"}'
echo '{"type":"telemetry","data":1}'
echo ''
echo '{"type":"output","text":"still here\n"}'
echo '{"type":"log","level":"warn","message":"careful"}'
echo '{"type":"log","level":"trace","message":"odd level"}'
echo '{"type":"output","text":"done\n"}'
