/** A name for a nail class (1.x API; see {@link ngw.api.AliasBase}). */
package com.facebook.nailgun;

/** See the file comment. */
public class Alias extends ngw.api.AliasBase {
    public Alias(String name, String description, Class<?> clazz) {
        super(name, description, clazz);
    }
}
