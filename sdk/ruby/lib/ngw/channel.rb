# frozen_string_literal: true

require 'socket'
require_relative 'wire'

module Ngw
  # The worker's end of the socketpair ngd made (NGW_FD). Reads go through
  # `recvmsg(scm_rights: true)`, because ngd sends a session's descriptors (several in one
  # SCM_RIGHTS message) with the header's first byte, and `UNIXSocket#recv_io` would keep
  # only one of them. Writes are queued and sent without blocking, so the worker keeps
  # reading the channel (and sees an interrupt) while ngd is not taking output.
  class Channel
    attr_reader :io

    # A chunk read from the channel: its type, payload and the descriptors that came with
    # it (the IO objects Ruby made for them, close-on-exec), or an empty array.
    Chunk = Struct.new(:type, :payload, :fds)

    def initialize(io)
      @io = io
      @inbuf = String.new(encoding: Encoding::BINARY)
      @outbuf = String.new(encoding: Encoding::BINARY)
      @eof = false
      # Descriptors that arrived with a read, waiting for the first chunk that starts in
      # that read; [offset in @inbuf where the read's data began, [IO...]].
      @pending_fds = nil
      @backlog = []
    end

    def eof?
      @eof
    end

    # Chunks read but not handled yet: read_chunks returns them first.
    def backlog?
      !@backlog.empty?
    end

    def unread(chunks)
      @backlog = chunks + @backlog
    end

    # Bytes queued for ngd and not yet written.
    def pending_output
      @outbuf.bytesize
    end

    # Queues one chunk for ngd and writes what the socket takes now.
    def send_chunk(type, payload = '')
      @outbuf << Wire.chunk(type, payload)
      flush_some
    end

    # Writes queued output without blocking; returns true when nothing is left.
    def flush_some
      until @outbuf.empty?
        begin
          n = @io.write_nonblock(@outbuf, exception: false)
        rescue Errno::EPIPE, Errno::ECONNRESET
          @outbuf.clear
          @eof = true
          return true
        end
        return false if n == :wait_writable

        @outbuf.replace(@outbuf.byteslice(n, @outbuf.bytesize - n))
      end
      true
    end

    # Writes everything queued, blocking (used before the worker exits).
    def flush_all
      loop do
        break if flush_some || !IO.select(nil, [@io], nil, 5)
      end
    end

    # Returns the backlog if there is one; else reads once from the socket (it must be
    # readable) and returns the complete chunks that arrived, as Chunk structs. At end of
    # stream sets eof? and returns what is left.
    def read_chunks
      unless @backlog.empty?
        chunks = @backlog
        @backlog = []
        return chunks
      end
      data, _addr, rflags, *controls = @io.recvmsg(1 << 16, 0, 512, scm_rights: true)
      fds = controls.flat_map { |c| c.cmsg_is?(:SOCKET, :RIGHTS) ? c.unix_rights : [] }
      if data.nil? || data.empty?
        @eof = true
        fds.each(&:close)
        return []
      end
      if rflags.anybits?(Socket::MSG_CTRUNC)
        fds.each(&:close)
        fds = []
      end
      unless fds.empty?
        close_pending
        @pending_fds = [@inbuf.bytesize, fds]
      end
      @inbuf << data
      before = @inbuf.bytesize
      chunks = []
      Wire.each_chunk(@inbuf) do |type, payload, start|
        taken = []
        if @pending_fds && start >= @pending_fds[0] && 'AEDC'.include?(type)
          taken = @pending_fds[1]
          @pending_fds = nil
        end
        chunks << Chunk.new(type, payload, taken)
      end
      keep_pending(before - @inbuf.bytesize)
      chunks
    rescue Errno::ECONNRESET
      @eof = true
      []
    end

    # After `consumed` bytes were cut from the front of the buffer: descriptors whose chunk
    # has not fully arrived wait for it; those that came with a chunk of another type are
    # closed.
    def keep_pending(consumed)
      return unless @pending_fds

      if @inbuf.empty? || @pending_fds[0] < consumed
        close_pending
      else
        @pending_fds[0] -= consumed
      end
    end

    def close_pending
      return unless @pending_fds

      @pending_fds[1].each { |f| f.close unless f.closed? }
      @pending_fds = nil
      @backlog = []
    end
  end
end
