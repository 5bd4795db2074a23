/** The worker's aliases, seen through the 1.x API. */
package com.facebook.nailgun;

import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;

import ngw.NailSession;

/** See the file comment. */
public class AliasManager {
    private final NailSession.WorkerView worker;

    AliasManager(NailSession.WorkerView worker) {
        this.worker = worker;
    }

    /** Adds {@code name=class.Name} entries (the {@code .desc} entries are ignored). */
    public void loadFromProperties(Properties p) {
        for (String key : p.stringPropertyNames()) {
            if (!key.endsWith(".desc")) {
                worker.addAlias(key, p.getProperty(key));
            }
        }
    }

    public void addAlias(Alias alias) {
        worker.addAlias(alias.getName(), alias.getAliasedClass().getName());
    }

    public Set<Alias> getAliases() {
        Set<Alias> set = new TreeSet<>();
        for (String name : worker.aliases().keySet()) {
            Alias a = getAlias(name);
            if (a != null) {
                set.add(a);
            }
        }
        return set;
    }

    public void removeAlias(String name) {
        worker.removeAlias(name);
    }

    public Alias getAlias(String name) {
        String cls = worker.aliases().get(name);
        if (cls == null) {
            return null;
        }
        try {
            return new Alias(name, "", Class.forName(cls, false, Thread.currentThread().getContextClassLoader()));
        } catch (ClassNotFoundException e) {
            return null;
        }
    }
}
