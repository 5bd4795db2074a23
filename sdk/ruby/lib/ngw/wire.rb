# frozen_string_literal: true

# The ngw wire format (docs/ngw.md section 2): Nailgun chunks, a 4-byte big-endian payload
# length and a type byte, then the payload. Also a small JSON encoder for the hello and the
# notices, so that the worker does not load the json library into every session's child.
module Ngw
  # Chunk framing: encoding chunks and cutting a byte buffer into them.
  module Wire
    # The largest payload the worker accepts from ngd (announced in the hello as max_chunk).
    MAX_CHUNK = 16 * 1024 * 1024
    # The largest output chunk the worker sends.
    OUT_CHUNK = 64 * 1024

    # A chunk with a payload over MAX_CHUNK: a fatal protocol error.
    class TooLarge < StandardError; end

    module_function

    # One chunk of type `type` (a one-character string) carrying `payload`, as bytes.
    def chunk(type, payload = '')
      payload = payload.b
      [payload.bytesize].pack('N') << type << payload
    end

    # Removes every complete chunk from the front of `buf` (a binary string) and yields
    # each as `[type, payload, start]`, where start is the chunk's offset in the buffer as
    # it was when the call began.
    def each_chunk(buf)
      offset = 0
      while buf.bytesize - offset >= 5
        len = buf.byteslice(offset, 4).unpack1('N')
        raise TooLarge, "chunk of #{len} bytes over the cap of #{MAX_CHUNK}" if len > MAX_CHUNK
        break if buf.bytesize - offset - 5 < len

        type = buf.byteslice(offset + 4, 1)
        payload = buf.byteslice(offset + 5, len)
        yield type, payload, offset
        offset += 5 + len
      end
      buf.replace(buf.byteslice(offset, buf.bytesize - offset)) if offset.positive?
    end

    # `value` (Hash, Array, String, Integer, true, false, nil) as compact JSON.
    def json(value)
      case value
      when Hash then "{#{value.map { |k, v| "#{json(k.to_s)}:#{json(v)}" }.join(',')}}"
      when Array then "[#{value.map { |v| json(v) }.join(',')}]"
      when String then json_string(value)
      when Integer, true, false then value.to_s
      when nil then 'null'
      else json_string(value.to_s)
      end
    end

    # A JSON string literal; bytes that are not valid UTF-8 are replaced.
    def json_string(str)
      str = str.dup.force_encoding(Encoding::UTF_8)
      str = str.scrub('?') unless str.valid_encoding?
      escaped = str.gsub(/["\\\u0000-\u001f]/) do |c|
        case c
        when '"' then '\\"'
        when '\\' then '\\\\'
        when "\n" then '\\n'
        when "\t" then '\\t'
        else format('\\u%04x', c.ord)
        end
      end
      "\"#{escaped}\""
    end
  end
end
