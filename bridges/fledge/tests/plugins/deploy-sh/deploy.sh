#!/usr/bin/env bash
send() { echo "$1"; }
recv() { read -r line; echo "$line"; }
# Wait for init
INIT=$(recv)
# Prompt
send '{"type":"prompt","id":"1","message":"Deploy target:","default":"staging"}'
RESP=$(recv)
# Output
send "{\"type\":\"output\",\"text\":\"Deploying to $TARGET\\n\"}"
