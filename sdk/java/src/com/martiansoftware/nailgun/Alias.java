/** A name for a nail class (0.9 API). */
package com.martiansoftware.nailgun;

/** See the file comment. */
public class Alias implements Comparable<Object> {
    private final String name;
    private final String description;
    private final Class<?> clazz;

    public Alias(String name, String description, Class<?> clazz) {
        this.name = name;
        this.description = description == null ? "" : description;
        this.clazz = clazz;
    }

    public Class<?> getAliasedClass() {
        return clazz;
    }

    public String getName() {
        return name;
    }

    public String getDescription() {
        return description;
    }

    @Override
    public int hashCode() {
        return name.hashCode();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Alias a && a.name.equals(name);
    }

    @Override
    public int compareTo(Object o) {
        return name.compareTo(((Alias) o).name);
    }
}
