/** A name for a nail class (0.9 API; see {@link ngw.api.AliasBase}). */
package com.martiansoftware.nailgun;

/** See the file comment. */
public class Alias extends ngw.api.AliasBase {
    public Alias(String name, String description, Class<?> clazz) {
        super(name, description, clazz);
    }
}
