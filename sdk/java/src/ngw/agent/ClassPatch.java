/**
 * A minimal class-file editor: prepends {@code iload_1; invokestatic OWNER.NAME(I)V} to
 * chosen {@code (I)V} methods of one class.
 *
 * <p>It exists so the worker can trap {@code System.exit} on every JDK without a
 * SecurityManager and without a bytecode library whose class-file version support lags the
 * JDK. It touches only what such a prefix shifts: the code array, {@code max_stack}, the
 * exception table, {@code LineNumberTable}, {@code LocalVariableTable}, {@code
 * LocalVariableTypeTable} and the first {@code StackMapTable} frame. A method whose code has
 * any other attribute is refused ({@link PatchException}), never patched half-way.
 */
package ngw.agent;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.BufferUnderflowException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** See the file comment. */
public final class ClassPatch {
    /** Why a class could not be patched. */
    public static final class PatchException extends Exception {
        private static final long serialVersionUID = 1L;

        PatchException(String message) {
            super(message);
        }
    }

    private static final int PREFIX_LEN = 4;

    private ClassPatch() {}

    /**
     * Returns {@code classFile} with every method named in {@code hooks} (descriptor
     * {@code (I)V}) starting with a call of {@code owner.hooks.get(name)(int)} on its first
     * argument.
     */
    public static byte[] prefixIntCalls(byte[] classFile, String owner, Map<String, String> hooks)
            throws PatchException {
        try {
            return new ClassPatch.Editor(classFile).patch(owner, hooks);
        } catch (BufferUnderflowException | IndexOutOfBoundsException | IllegalArgumentException e) {
            throw new PatchException("truncated or malformed class file");
        } catch (IOException e) {
            throw new PatchException(e.toString());
        }
    }

    private static final class Editor {
        private final ByteBuffer in;
        private final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        private final DataOutputStream out = new DataOutputStream(bytes);
        private final List<String> utf8 = new ArrayList<>();
        private int cpCount;

        Editor(byte[] classFile) {
            this.in = ByteBuffer.wrap(classFile);
        }

        byte[] patch(String owner, Map<String, String> hooks) throws IOException, PatchException {
            if (in.getInt() != 0xCAFEBABE) {
                throw new PatchException("not a class file");
            }
            int versions = in.getInt();
            cpCount = in.getShort() & 0xFFFF;
            int cpStart = in.position();
            utf8.add(null);
            for (int i = 1; i < cpCount; i++) {
                int tag = in.get() & 0xFF;
                switch (tag) {
                    case 1 -> {
                        int len = in.getShort() & 0xFFFF;
                        byte[] b = new byte[len];
                        in.get(b);
                        utf8.add(new String(b, java.nio.charset.StandardCharsets.UTF_8));
                    }
                    case 3, 4, 9, 10, 11, 12, 17, 18 -> { in.position(in.position() + 4); utf8.add(null); }
                    case 5, 6 -> { in.position(in.position() + 8); utf8.add(null); utf8.add(null); i++; }
                    case 7, 8, 16, 19, 20 -> { in.position(in.position() + 2); utf8.add(null); }
                    case 15 -> { in.position(in.position() + 3); utf8.add(null); }
                    default -> throw new PatchException("unknown constant pool tag " + tag);
                }
            }
            int cpEnd = in.position();

            // New constants: the owner class, and a Methodref per hook method.
            int next = cpCount;
            ByteArrayOutputStream extra = new ByteArrayOutputStream();
            DataOutputStream x = new DataOutputStream(extra);
            int ownerUtf8 = next++;
            x.writeByte(1);
            x.writeUTF(owner);
            int ownerClass = next++;
            x.writeByte(7);
            x.writeShort(ownerUtf8);
            int descUtf8 = next++;
            x.writeByte(1);
            x.writeUTF("(I)V");
            Map<String, Integer> refs = new java.util.HashMap<>();
            for (Map.Entry<String, String> e : hooks.entrySet()) {
                int nameUtf8 = next++;
                x.writeByte(1);
                x.writeUTF(e.getValue());
                int nat = next++;
                x.writeByte(12);
                x.writeShort(nameUtf8);
                x.writeShort(descUtf8);
                int ref = next++;
                x.writeByte(10);
                x.writeShort(ownerClass);
                x.writeShort(nat);
                refs.put(e.getKey(), ref);
            }
            if (next > 0xFFFF) {
                throw new PatchException("constant pool full");
            }

            out.writeInt(0xCAFEBABE);
            out.writeInt(versions);
            out.writeShort(next);
            out.write(in.array(), cpStart, cpEnd - cpStart);
            out.write(extra.toByteArray());

            copy(6); // access, this, super
            int interfaces = copyShort();
            copy(2 * interfaces);
            int fields = copyShort();
            for (int i = 0; i < fields; i++) {
                copy(6);
                copyAttributes();
            }
            int methods = copyShort();
            int done = 0;
            for (int i = 0; i < methods; i++) {
                copy(2);
                String name = utf8.get(copyShort());
                String desc = utf8.get(copyShort());
                Integer ref = "(I)V".equals(desc) ? refs.get(name) : null;
                if (ref == null) {
                    copyAttributes();
                } else {
                    patchMethodAttributes(ref, name);
                    done++;
                }
            }
            if (done != hooks.size()) {
                throw new PatchException("found " + done + " of the " + hooks.size() + " methods");
            }
            copyAttributes();
            if (in.hasRemaining()) {
                throw new PatchException("trailing bytes after the class");
            }
            out.flush();
            return bytes.toByteArray();
        }

        private void copy(int n) throws IOException {
            out.write(in.array(), in.position(), n);
            in.position(in.position() + n);
        }

        private int copyShort() throws IOException {
            int v = in.getShort() & 0xFFFF;
            out.writeShort(v);
            return v;
        }

        private void copyAttributes() throws IOException {
            int count = copyShort();
            for (int i = 0; i < count; i++) {
                copy(2);
                int len = in.getInt();
                out.writeInt(len);
                copy(len);
            }
        }

        private void patchMethodAttributes(int ref, String method) throws IOException, PatchException {
            int count = copyShort();
            boolean code = false;
            for (int i = 0; i < count; i++) {
                int nameIndex = in.getShort() & 0xFFFF;
                int len = in.getInt();
                if (!"Code".equals(utf8.get(nameIndex))) {
                    out.writeShort(nameIndex);
                    out.writeInt(len);
                    copy(len);
                    continue;
                }
                byte[] patched = patchCode(ref, method, len);
                out.writeShort(nameIndex);
                out.writeInt(patched.length);
                out.write(patched);
                code = true;
            }
            if (!code) {
                throw new PatchException(method + " has no code");
            }
        }

        private byte[] patchCode(int ref, String method, int len) throws IOException, PatchException {
            int end = in.position() + len;
            ByteArrayOutputStream b = new ByteArrayOutputStream(len + 16);
            DataOutputStream o = new DataOutputStream(b);
            int maxStack = in.getShort() & 0xFFFF;
            o.writeShort(Math.max(maxStack, 1));
            o.writeShort(in.getShort() & 0xFFFF);
            int codeLen = in.getInt();
            o.writeInt(codeLen + PREFIX_LEN);
            o.writeByte(0x1b); // iload_1
            o.writeByte(0xb8); // invokestatic
            o.writeShort(ref);
            o.write(in.array(), in.position(), codeLen);
            in.position(in.position() + codeLen);
            int handlers = in.getShort() & 0xFFFF;
            o.writeShort(handlers);
            for (int i = 0; i < handlers; i++) {
                o.writeShort((in.getShort() & 0xFFFF) + PREFIX_LEN);
                o.writeShort((in.getShort() & 0xFFFF) + PREFIX_LEN);
                o.writeShort((in.getShort() & 0xFFFF) + PREFIX_LEN);
                o.writeShort(in.getShort() & 0xFFFF);
            }
            int attrs = in.getShort() & 0xFFFF;
            o.writeShort(attrs);
            for (int i = 0; i < attrs; i++) {
                int nameIndex = in.getShort() & 0xFFFF;
                int alen = in.getInt();
                int aend = in.position() + alen;
                String name = utf8.get(nameIndex);
                ByteArrayOutputStream ab = new ByteArrayOutputStream(alen + 4);
                DataOutputStream a = new DataOutputStream(ab);
                switch (name == null ? "" : name) {
                    case "LineNumberTable" -> {
                        int n = in.getShort() & 0xFFFF;
                        a.writeShort(n);
                        for (int k = 0; k < n; k++) {
                            int pc = in.getShort() & 0xFFFF;
                            a.writeShort(pc == 0 ? 0 : pc + PREFIX_LEN);
                            a.writeShort(in.getShort() & 0xFFFF);
                        }
                    }
                    case "LocalVariableTable", "LocalVariableTypeTable" -> {
                        int n = in.getShort() & 0xFFFF;
                        a.writeShort(n);
                        for (int k = 0; k < n; k++) {
                            int start = in.getShort() & 0xFFFF;
                            int length = in.getShort() & 0xFFFF;
                            if (start == 0) {
                                a.writeShort(0);
                                a.writeShort(length + PREFIX_LEN);
                            } else {
                                a.writeShort(start + PREFIX_LEN);
                                a.writeShort(length);
                            }
                            a.writeShort(in.getShort() & 0xFFFF);
                            a.writeShort(in.getShort() & 0xFFFF);
                            a.writeShort(in.getShort() & 0xFFFF);
                        }
                    }
                    case "StackMapTable" -> shiftFirstFrame(a, aend);
                    default -> throw new PatchException(
                            method + "'s code has a " + name + " attribute, which this patch cannot shift");
                }
                if (in.position() != aend) {
                    throw new PatchException(method + ": malformed " + name);
                }
                byte[] body = ab.toByteArray();
                o.writeShort(nameIndex);
                o.writeInt(body.length);
                o.write(body);
            }
            if (in.position() != end) {
                throw new PatchException(method + ": malformed Code attribute");
            }
            return b.toByteArray();
        }

        /** Re-encodes the first frame with its offset 4 later; the others are relative. */
        private void shiftFirstFrame(DataOutputStream a, int attributeEnd) throws IOException, PatchException {
            int frames = in.getShort() & 0xFFFF;
            a.writeShort(frames);
            if (frames == 0) {
                return;
            }
            int type = in.get() & 0xFF;
            if (type <= 63) {
                int delta = type + PREFIX_LEN;
                if (delta <= 63) {
                    a.writeByte(delta);
                } else {
                    a.writeByte(251);
                    a.writeShort(delta);
                }
            } else if (type <= 127) {
                int delta = type - 64 + PREFIX_LEN;
                if (delta <= 63) {
                    a.writeByte(64 + delta);
                } else {
                    a.writeByte(247);
                    a.writeShort(delta);
                }
            } else if (type >= 247) {
                a.writeByte(type);
                a.writeShort((in.getShort() & 0xFFFF) + PREFIX_LEN);
            } else {
                throw new PatchException("reserved stack map frame type " + type);
            }
            // The rest of the table, the first frame's verification types included, is
            // unchanged.
            a.write(in.array(), in.position(), attributeEnd - in.position());
            in.position(attributeEnd);
        }
    }
}
